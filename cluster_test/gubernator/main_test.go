package main

import (
	"io"
	"testing"
	"time"
)

func TestBucketBound(t *testing.T) {
	l := limit{rate: limitedRate, period: limitedPeriod, burst: limitedBurst}
	for _, c := range []struct {
		span time.Duration
		want int64
	}{
		{0, 100},
		{10 * time.Second, 1100},
		{10*time.Second + 9*time.Millisecond, 1100},
		{10*time.Second + 10*time.Millisecond, 1101},
	} {
		if got := bucketBound(l, c.span); got != c.want {
			t.Errorf("bucketBound(100/s burst 100, %v) = %d, want %d", c.span, got, c.want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	c, err := parseFlags([]string{"-members", "3, 10", "-systems", "ringlimit,gubernator-global", "-loads", "limited"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.sizes) != 2 || c.sizes[0] != 3 || c.sizes[1] != 10 {
		t.Errorf("sizes = %v, want [3 10]", c.sizes)
	}
	if c.leaseSize != 1024 || len(c.systems) != 2 || len(c.loads) != 1 || c.duration != 10*time.Second || c.callers != 64 {
		t.Errorf("config = %+v", c)
	}
	for _, bad := range [][]string{
		{"-members", "0"},
		{"-members", "x"},
		{"-systems", "redis"},
		{"-loads", "zipf"},
		{"-callers", "0"},
		{"-duration", "0s"},
		{"-rounds", "0"},
		{"-members", "1", "-non-owners"},
		{"-lease-size", "0"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%v) accepted", bad)
		}
	}
}
