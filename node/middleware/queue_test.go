package middleware

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// TestHTTPQueue: with WithQueue, requests over the limit wait for their
// slot instead of a 429: 12 concurrent requests on a key of 10 per second
// (GCRA, burst 1) through two nodes all pass, spread over about a second;
// a queue bound shorter than the slot answers 429 at once.
func TestHTTPQueue(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := nodetest.StartCluster(ctx, 2, nodetest.TestConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l := algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Second, Burst: 1}
	var urls []string
	var waited atomic.Int64
	for _, n := range c.Nodes() {
		nl, err := NodeLimiter(n, l, "api", "")
		if err != nil {
			t.Fatal(err)
		}
		mw, err := HTTP(nl, WithKeyFunc(func(*http.Request) (string, error) { return "one", nil }), WithQueue(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if v, ok := VerdictFrom(r.Context()); ok && v.Waited > 0 {
				waited.Add(1)
			}
		})))
		defer srv.Close()
		urls = append(urls, srv.URL)
	}
	start := time.Now()
	var wg sync.WaitGroup
	codes := make([]int, 12)
	for i := range codes {
		wg.Go(func() {
			resp, err := http.Get(urls[i%2])
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	for i, code := range codes {
		if code != http.StatusOK {
			t.Errorf("request %d: got %d, want 200 after queueing", i, code)
		}
	}
	if got := waited.Load(); got < 9 {
		t.Errorf("%d requests saw Verdict.Waited > 0, want 10 (all but the capacity of 2)", got)
	}
	// Capacity 2 at once, then one per 100 ms: the 12th at 1 s.
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("12 requests took %v, want at least 1 s (queued, one per 100 ms)", took)
	}

	// A queue of 50 ms on a slot a second away: 429 at once.
	nl, err := NodeLimiter(c.Nodes()[0], algo.Limit{Kind: algo.GCRA, Limit: 1, Period: time.Second}, "slow", "")
	if err != nil {
		t.Fatal(err)
	}
	mw, err := HTTP(nl, WithKeyFunc(func(*http.Request) (string, error) { return "slow", nil }), WithQueue(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		if w.Code != want {
			t.Errorf("slow request %d: got %d, want %d", i, w.Code, want)
		}
	}
}

// TestQueueOptionRefused: WithQueue needs a NodeLimiter over GCRA or a
// token bucket and a bound in (0, node.MaxWait].
func TestQueueOptionRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := nodetest.StartCluster(ctx, 1, nodetest.TestConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	win, err := NodeLimiter(c.Nodes()[0], algo.Limit{Kind: algo.FixedWindow, Limit: 10, Period: time.Second}, "w", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := HTTP(win, WithQueue(time.Second)); !errors.Is(err, ErrInvalidOption) || !errors.Is(err, algo.ErrReserveUnsupported) {
		t.Errorf("fixed_window: got %v, want ErrInvalidOption wrapping ErrReserveUnsupported", err)
	}
	g, err := NodeLimiter(c.Nodes()[0], algo.Limit{Kind: algo.GCRA, Limit: 10, Period: time.Second}, "g", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{0, -1, 25 * time.Hour} {
		if _, err := HTTP(g, WithQueue(d)); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("WithQueue(%v): got %v, want ErrInvalidOption", d, err)
		}
	}
	if _, err := HTTPDescriptors(nil, "", nil, WithQueue(time.Second)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("HTTPDescriptors: got %v, want ErrInvalidOption", err)
	}
}
