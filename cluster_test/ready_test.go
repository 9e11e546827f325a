package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/node"
)

// Checks made on members that are not Ready yet are exact: a cluster forms
// under load, each new member taking checks as soon as New returns, while the
// members it joins have not admitted it yet and its handoffs are on their way.
// A check there waits for, or forwards to, the key's owner; none is decided
// by a backup or a fallback that does not hold the key's state, so no key
// goes over its limit.
func TestLoadBeforeReady(t *testing.T) {
	r := startLoad(t, loadSpec{Nodes: 1, Keys: 300, Callers: 32, Limit: crashLimit})
	// Let the first member admit some hits alone, so that the joins move
	// states that matter.
	r.waitAdmitted(int64(len(r.keys))*crashLimit.Limit/5, 30*time.Second)
	for i := 1; i < 5; i++ {
		r.join(fmt.Sprintf("node-%d", i))
	}
	conv := waitConverged(t, 20*time.Second, r.liveNodes()...)
	settled := time.Now()
	done := r.waitExhausted(settled, time.Second, 30*time.Second)
	r.stopLoad()
	sum := r.summary()
	t.Logf("5 members formed under load, ring agreed %v after the last join; every key denied again %v later: %s",
		conv.Round(time.Millisecond), done.Sub(settled).Round(time.Millisecond), sum)
	bad := 0
	for k, a := range sum.admitted {
		if a > crashLimit.Limit {
			if bad++; bad <= 10 {
				t.Errorf("key %s admitted %d, want at most %d", r.keys[k], a, crashLimit.Limit)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d keys over their limit, %d extra admissions", bad, len(r.keys), sum.extra)
	}
	for _, route := range []node.Route{node.RouteFallback, node.RouteBackup} {
		if n := sum.admits[route.String()]; n > 0 {
			t.Errorf("%d checks admitted by route %s, want 0: every owner was alive", n, route)
		}
	}
	if sum.errs > 0 {
		t.Errorf("%d checks failed, first: %v", sum.errs, sum.firstErrs)
	}
}
