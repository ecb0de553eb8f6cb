package settle

import (
	"time"

	"github.com/settle/settle/bankclient"
)

// Connector is the connector of settle's own protocol (DESIGN.md
// section 7), the default: the kindest bank there is, which looks payments
// up by our key, keeps keys for ever (or key_ttl_ms in the fakebank) and
// takes any reference.
var Connector = bankclient.Connector{
	Name:    "settle",
	Summary: "settle's own bank protocol (DESIGN.md section 7; settle fakebank serves it)",
	Capabilities: bankclient.Capabilities{
		LookupByKey: true,
		Search:      true,
		Replay:      bankclient.ReplayStored,
		RefMaxLen:   256,
		MaxAmount:   MaxProtocolAmount,
	},
	New:           func(baseURL string, opts bankclient.Options) (bankclient.Bank, error) { return New(baseURL, opts) },
	VerifyWebhook: verifyWebhook,
	// Any bank returns a payment within days; settle's status API reports
	// it for a week.
	DefaultReturnWatch: 7 * 24 * time.Hour,
}
