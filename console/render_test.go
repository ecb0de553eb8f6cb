package console

import (
	"testing"
	"time"

	"github.com/settle/settle/inspect"
)

func TestFormats(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ got, want string }{
		{money(123456, "EUR"), "1,234.56 EUR"},
		{money(5, "EUR"), "0.05 EUR"},
		{money(-5, "EUR"), "-0.05 EUR"},
		{money(1500, "JPY"), "1,500 JPY"},
		{money(1234, "KWD"), "1.234 KWD"},
		{money(77, "XXX"), "77 XXX"},
		{thousands(-1234567), "-1,234,567"},
		{human(850 * time.Millisecond), "850ms"},
		{human(12300 * time.Millisecond), "12.3s"},
		{human(15 * time.Minute), "15m"},
		{human(4*time.Minute + 5*time.Second), "4m05s"},
		{human(3*time.Hour + 2*time.Minute), "3h02m"},
		{human(50 * time.Hour), "2d02h"},
		{human(-time.Second), "0ms"},
		{countText(inspect.Count{N: 12, Exact: true}), "12"},
		{countText(inspect.Count{N: 994000}), "≈ 994,000"},
		{countText(inspect.Count{N: 10001, AtLeast: true}), "more than 10,000"},
		{storyURL("a b/c&d"), "/console/settlement?id=a+b%2Fc%26d"},
		{listURL("state", "uncertain", "account", "", "after", "1.x"), "/console/settlements?after=1.x&state=uncertain"},
		{listURL(), "/console/settlements"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
