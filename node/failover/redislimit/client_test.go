package redislimit_test

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/node/failover/redislimit"
)

func TestNewClientKinds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url  string
		want string
	}{
		{"redis://127.0.0.1:1/0", "*redis.Client"},
		{"rediss://u:p@127.0.0.1:1/2?max_retries=2", "*redis.Client"},
		{"redis://127.0.0.1:26379?master_name=mymaster&addr=127.0.0.1:26380", "*redis.Client"}, // Sentinel: a failover *redis.Client
		{"redis://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002", "*redis.ClusterClient"},
	} {
		c, err := redislimit.NewClient(tc.url)
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		got := "*redis.Client"
		if _, ok := c.(*redis.ClusterClient); ok {
			got = "*redis.ClusterClient"
		}
		if got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.url, got, tc.want)
		}
		c.Close()
	}
	for _, bad := range []string{"http://x", "redis://x?no_such_option=1", "redis://x?addr=y&no_such=1", "::"} {
		if _, err := redislimit.NewClient(bad); !errors.Is(err, redislimit.ErrInvalidOptions) {
			t.Errorf("%q: got %v, want ErrInvalidOptions", bad, err)
		}
	}
}
