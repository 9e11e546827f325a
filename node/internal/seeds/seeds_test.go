package seeds

import (
	"context"
	"errors"
	"slices"
	"testing"
)

func TestResolveSeeds(t *testing.T) {
	t.Parallel()
	dns := map[string][]string{
		"peers.ns.svc": {"10.0.0.1", "10.0.0.2"},
		"v6.example":   {"fd00::1"},
		"bogus":        {"not-an-ip"},
		"empty":        nil,
	}
	resolve := func(_ context.Context, host string) ([]string, error) {
		if a, ok := dns[host]; ok {
			return a, nil
		}
		return nil, errors.New("no such host")
	}
	for _, tc := range []struct {
		join     []string
		want     []string
		wantErrs int
	}{
		{[]string{"127.0.0.1:7946"}, []string{"127.0.0.1:7946"}, 0},
		{[]string{"127.0.0.1"}, []string{"127.0.0.1"}, 0},
		{[]string{"[::1]:7946", "::1"}, []string{"[::1]:7946", "::1"}, 0},
		{[]string{"peers.ns.svc:7000"}, []string{"10.0.0.1:7000", "10.0.0.2:7000"}, 0},
		{[]string{"peers.ns.svc"}, []string{"10.0.0.1", "10.0.0.2"}, 0},
		{[]string{"v6.example:7946"}, []string{"[fd00::1]:7946"}, 0},
		{[]string{"node-a/peers.ns.svc:7000"}, []string{"node-a/10.0.0.1:7000", "node-a/10.0.0.2:7000"}, 0},
		{[]string{"gone.example:7946", "127.0.0.1:1"}, []string{"127.0.0.1:1"}, 1},
		{[]string{"bogus:1", "empty:1"}, nil, 2},
	} {
		got, errs := Resolve(context.Background(), tc.join, resolve)
		if !slices.Equal(got, tc.want) || len(errs) != tc.wantErrs {
			t.Errorf("Resolve(%q) = %q, %v; want %q and %d errors", tc.join, got, errs, tc.want, tc.wantErrs)
		}
	}
}

func TestNotLive(t *testing.T) {
	t.Parallel()
	live := map[string]bool{"10.0.0.1:7946": true, "[fd00::1]:7946": true}
	for _, tc := range []struct {
		seeds, want []string
	}{
		{[]string{"10.0.0.1:7946", "10.0.0.2:7946"}, []string{"10.0.0.2:7946"}},
		{[]string{"10.0.0.1:7000"}, []string{"10.0.0.1:7000"}},   // another port: another process
		{[]string{"10.0.0.1", "10.0.0.2"}, []string{"10.0.0.2"}}, // no port: the default, 7946
		{[]string{"fd00::1", "[fd00::1]:7946", "[fd00::2]:7946"}, []string{"[fd00::2]:7946"}},
		{[]string{"a/10.0.0.1:7946", "b/10.0.0.3:7946"}, []string{"b/10.0.0.3:7946"}},
		{[]string{"10.0.0.1:7946"}, nil},
		{[]string{"not-an-ip:7946"}, []string{"not-an-ip:7946"}},
	} {
		if got := NotLive(tc.seeds, live, 7946); !slices.Equal(got, tc.want) {
			t.Errorf("NotLive(%q) = %q, want %q", tc.seeds, got, tc.want)
		}
	}
}
