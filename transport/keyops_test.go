package transport

import "testing"

// Every route, a cached denial and a lease included, survives the public wire.
func TestRouteRoundTrip(t *testing.T) {
	t.Parallel()
	for r := RouteOwner; r <= RouteLease; r++ {
		if got := routeFromWire(routeToWire(r)); got != r {
			t.Errorf("route %v came back as %v", r, got)
		}
	}
	if RouteCachedDenial.String() != "cached_denial" {
		t.Errorf("RouteCachedDenial.String() = %q", RouteCachedDenial.String())
	}
	if RouteLease.String() != "lease" {
		t.Errorf("RouteLease.String() = %q", RouteLease.String())
	}
}
