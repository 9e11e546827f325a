package policy_test

import (
	"context"
	"fmt"

	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
	"github.com/ringlimit/ringlimit/node/policy"
)

// The seed's flow: a default per API and an override for one app, checked on a
// node (a cluster of one here).
func ExampleLimiter_Check() {
	cfg := nodetest.TestConfig()
	cfg.Name = "example"
	n, err := node.New(cfg)
	if err != nil {
		panic(err)
	}
	defer n.Close()
	p, err := policy.Parse("gateway.yaml", []byte(`
domain: gateway
descriptors:
  - key: app_id
    descriptors:
      - key: api_id
        value: reply
        rate_limit: {unit: hour, requests_per_unit: 1, name: reply_default}
  - key: app_id
    value: laoqian
    descriptors:
      - key: api_id
        value: reply
        rate_limit: {unit: hour, requests_per_unit: 2, name: reply_laoqian}
`))
	if err != nil {
		panic(err)
	}
	lim, err := policy.NewLimiter(n, p, nil)
	if err != nil {
		panic(err)
	}
	for _, app := range []string{"someone", "someone", "laoqian", "laoqian", "laoqian"} {
		res, err := lim.Check(context.Background(), "gateway", []policy.Descriptor{{Entries: []policy.Entry{
			{Key: "app_id", Value: app}, {Key: "api_id", Value: "reply"},
		}}}, 1)
		if err != nil {
			panic(err)
		}
		d := res.Decisions[0]
		fmt.Println(app, d.Rule.ID(), d.Allowed, d.Remaining)
	}
	// Output:
	// someone reply_default true 0
	// someone reply_default false 0
	// laoqian reply_laoqian true 1
	// laoqian reply_laoqian true 0
	// laoqian reply_laoqian false 0
}
