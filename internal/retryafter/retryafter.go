// Package retryafter reads the Retry-After header (RFC 9110 section
// 10.2.3) the one way settle does, for answers from the bank and from
// settle's own API alike.
package retryafter

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Max bounds any wait a server may ask for: a Retry-After of a day, or a
// date far ahead, is read as an hour, so a confused server cannot park a
// payment or a producer for longer.
const Max = time.Hour

// Parse reads h's Retry-After, either delay-seconds or an HTTP date
// (relative to now), bounded to [0, Max]. ok is false when the header is
// absent or is neither form.
func Parse(h http.Header, now time.Time) (d time.Duration, ok bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs > int64(Max/time.Second) {
			return Max, true
		}
		return max(time.Duration(secs)*time.Second, 0), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), Max), true
	}
	return 0, false
}
