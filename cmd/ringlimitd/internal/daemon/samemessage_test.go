package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/remote"
)

// TestBadInputSameOnEveryDoor: the same bad check sent over HTTP, gRPC and
// RESP is refused by the one validation (node.Check.Validate) with the same
// field and message on each door: HTTP's {"error": ...}, the gRPC client's
// rebuilt *node.InputError, RESP's "ERR ..." reply.
func TestBadInputSameOnEveryDoor(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	d := startDaemon(t, testConfig(t, p, "doors", "--redis-port", "0"))
	waitUntil(t, 10*time.Second, "readyz", func() bool {
		c, _ := httpDo(t, "GET", "http://"+d.AdminAddr()+"/readyz", "")
		return c == 200
	})
	gc, err := remote.Dial(d.GRPCAddr(), p.clientTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	rc := redis.NewClient(&redis.Options{Addr: d.RedisAddr(), TLSConfig: p.anonTLS, Password: testToken, MaxRetries: -1})
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	long := strings.Repeat("k", algo.DefaultMaxKeyLen+1)
	for _, tc := range []struct {
		name  string
		check node.Check
		field string
	}{
		{"zero limit", node.Check{Key: "k", Limit: algo.Limit{Kind: algo.GCRA, Limit: 0, Period: time.Second}, Hits: 1}, "limit"},
		{"negative burst", node.Check{Key: "k", Limit: algo.Limit{Kind: algo.GCRA, Limit: 5, Period: time.Second, Burst: -1}, Hits: 1}, "burst"},
		{"empty bucket", node.Check{Key: "k", Limit: algo.Limit{Kind: algo.TokenBucket, Limit: 5, Period: time.Second}, Hits: 1}, "burst"},
		{"interval below 1 ns", node.Check{Key: "k", Limit: algo.Limit{Kind: algo.GCRA, Limit: 2_000_000_000, Period: time.Second}, Hits: 1}, "limit"},
		{"log too long", node.Check{Key: "k", Limit: algo.Limit{Kind: algo.SlidingWindowLog, Limit: algo.MaxLogLimit + 1, Period: time.Second}, Hits: 1}, "limit"},
		{"negative hits", node.Check{Key: "k", Limit: algo.Limit{Kind: algo.FixedWindow, Limit: 5, Period: time.Second}, Hits: -1}, "hits"},
		{"hits above max", node.Check{Key: "k", Limit: algo.Limit{Kind: algo.FixedWindow, Limit: 5, Period: time.Second}, Hits: algo.MaxHits + 1}, "hits"},
		{"key too long", node.Check{Key: long, Limit: algo.Limit{Kind: algo.FixedWindow, Limit: 5, Period: time.Second}, Hits: 1}, "key"},
	} {
		c := tc.check
		want := (&c).Validate(algo.DefaultMaxKeyLen)
		var ie *node.InputError
		if !errors.As(want, &ie) || ie.Field != tc.field {
			t.Fatalf("%s: node.Check.Validate: got %v, want an InputError on %s", tc.name, want, tc.field)
		}
		msg := ie.Message()

		// HTTP.
		body := fmt.Sprintf(`{"key":%q,"algorithm":%q,"limit":%d,"period_ns":%d,"burst":%d,"hits":%d}`,
			c.Key, c.Limit.Kind, c.Limit.Limit, int64(c.Limit.Period), c.Limit.Burst, c.Hits)
		code, resp := httpDoWith(t, p.certClient, "POST", "https://"+d.HTTPAddr()+"/v1/check", body, "")
		var e struct{ Error string }
		if err := json.Unmarshal([]byte(resp), &e); code != 400 || err != nil || e.Error != msg {
			t.Errorf("%s over HTTP: got %d %s, want 400 with %q", tc.name, code, resp, msg)
		}

		// gRPC.
		_, err := gc.Check(ctx, c)
		var gie *node.InputError
		if !errors.As(err, &gie) || gie.Field != ie.Field || gie.Value != ie.Value || gie.Allowed != ie.Allowed || node.Message(err) != msg {
			t.Errorf("%s over gRPC: got %v, want the InputError %q", tc.name, err, msg)
		}
		if node.Classify(err) != node.ClassInvalid {
			t.Errorf("%s over gRPC: got class %v, want invalid", tc.name, node.Classify(err))
		}

		// RESP.
		err = rc.Do(ctx, "RL.CHECK", c.Key, c.Limit.Kind.String(), c.Limit.Limit, "1s", c.Limit.Burst, c.Hits).Err()
		if err == nil || err.Error() != "ERR "+msg {
			t.Errorf("%s over RESP: got %v, want %q", tc.name, err, "ERR "+msg)
		}
	}
}
