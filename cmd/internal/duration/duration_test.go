package duration

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want time.Duration
		err  error
	}{
		{"1m", time.Minute, nil},
		{"1h30m", 90 * time.Minute, nil},
		{"250ms", 250 * time.Millisecond, nil},
		{"1.5s", 1500 * time.Millisecond, nil},
		{"2562047h47m16.854775807s", Max, nil},
		{"-2562047h47m16.854775808s", -Max - 1, nil},
		{"2562047h47m16.854775808s", 0, ErrOverflow},
		{"10000000h", 0, ErrOverflow},
		{"-10000000h", 0, ErrOverflow},
		{"9223372036854775808ns", 0, ErrOverflow},
		{"1000000000000000000000000s", 0, ErrOverflow},
		{"soon", 0, ErrSyntax},
		{"10", 0, ErrSyntax},
		{"", 0, ErrSyntax},
		{"1x", 0, ErrSyntax},
		{"1..5s", 0, ErrSyntax},
		{"h", 0, ErrSyntax},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("Parse(%q): got %v, %v; want %v", tt.in, got, err, tt.err)
			}
			if tt.err == ErrOverflow && !strings.Contains(err.Error(), "2562047h47m16.854775807s") {
				t.Errorf("Parse(%q): %v does not name the maximum", tt.in, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Parse(%q): got %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

// FuzzParse checks Parse against time.ParseDuration: the same value whenever
// the standard library accepts the text, and an error for everything it
// refuses; an overflow only for text exactNanos reads as a number past Max.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"1m", "10000000h", "1.5h", "-3us", "0", "+.5s", "1e3s", "9223372036854775807ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, werr := time.ParseDuration(s)
		got, err := Parse(s)
		if (werr == nil) != (err == nil) || got != want {
			t.Fatalf("Parse(%q) = %v, %v; time.ParseDuration = %v, %v", s, got, err, want, werr)
		}
		if errors.Is(err, ErrOverflow) {
			if _, ok := exactNanos(s); !ok {
				t.Fatalf("Parse(%q): overflow for text exactNanos does not read", s)
			}
		}
	})
}

func TestValue(t *testing.T) {
	t.Parallel()
	var d time.Duration
	v := Value{D: &d}
	if err := v.Set("90s"); err != nil || d != 90*time.Second || v.String() != "1m30s" || v.Type() != "duration" {
		t.Errorf("Set 90s: %v, %v, %q", err, d, v.String())
	}
	if err := v.Set("10000000h"); !errors.Is(err, ErrOverflow) || d != 90*time.Second {
		t.Errorf("Set 10000000h: %v, d %v; want ErrOverflow and d unchanged", err, d)
	}
}
