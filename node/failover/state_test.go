package failover_test

import (
	"testing"

	"github.com/ringlimit/ringlimit/internal/breaker"
	"github.com/ringlimit/ringlimit/node/failover"
)

// failover.State is converted from breaker.State by value: the two must
// number their states alike.
func TestStatesMatchTheBreaker(t *testing.T) {
	for _, s := range failover.States() {
		if got, want := s.String(), breaker.State(s).String(); got != want {
			t.Errorf("failover state %d is %q, the breaker's %q", s, got, want)
		}
	}
}
