// Package duration parses the periods callers give the daemon's HTTP API and
// the CLI as Go duration strings ("1m", "250ms"), and says so when a
// well-formed duration is too long for time.Duration instead of calling it
// malformed (time.ParseDuration answers `invalid duration` for both).
//
// Data flow: Parse tries time.ParseDuration; on failure it re-reads the text
// with exact rational arithmetic (math/big), and if the text is a well-formed
// duration whose value lies outside time.Duration's range it returns an error
// wrapping ErrOverflow that names the maximum. Value adapts Parse to a
// pflag.Value for command-line flags.
package duration

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"
)

// Max is the longest time.Duration: math.MaxInt64 ns, 2562047h47m16.854775807s
// (about 292 years).
const Max = time.Duration(math.MaxInt64)

// ErrOverflow is wrapped by Parse's error for a well-formed duration longer
// than Max (or shorter than -Max-1ns).
var ErrOverflow = errors.New("duration: overflows")

// ErrSyntax is wrapped by Parse's error for text that is not a Go duration.
var ErrSyntax = errors.New("duration: not a Go duration")

// Parse parses s as time.ParseDuration does. Errors: ErrOverflow (naming Max)
// for a well-formed duration out of range, ErrSyntax otherwise.
func Parse(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	if ns, ok := exactNanos(s); ok {
		if ns.Cmp(big.NewRat(math.MaxInt64, 1)) > 0 || ns.Cmp(big.NewRat(math.MinInt64, 1)) < 0 {
			return 0, fmt.Errorf("%w: %q is longer than the maximum %v (%d ns)", ErrOverflow, s, Max, int64(Max))
		}
	}
	return 0, fmt.Errorf("%w: %q (want a number and a unit such as \"1m\", \"250ms\" or \"1h30m\"; units ns, us, ms, s, m, h)", ErrSyntax, s)
}

// unitNanos returns a time.ParseDuration unit in ns, false for another string.
func unitNanos(u string) (int64, bool) {
	switch u {
	case "ns":
		return 1, true
	case "us", "µs", "μs":
		return 1e3, true
	case "ms":
		return 1e6, true
	case "s":
		return 1e9, true
	case "m":
		return 60e9, true
	case "h":
		return 3600e9, true
	}
	return 0, false
}

// exactNanos returns the value of s in ns, exactly, if s has the syntax of a
// Go duration: [-+]? ( digits [. digits] unit )+, or "0".
func exactNanos(s string) (*big.Rat, bool) {
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "0" {
		return new(big.Rat), true
	}
	if s == "" {
		return nil, false
	}
	total := new(big.Rat)
	for s != "" {
		i := 0
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		num := s[:i]
		if num == "" || num == "." || strings.Count(num, ".") > 1 {
			return nil, false
		}
		s = s[i:]
		j := 0
		for j < len(s) && s[j] != '.' && (s[j] < '0' || s[j] > '9') {
			j++
		}
		unit, ok := unitNanos(s[:j])
		if !ok {
			return nil, false
		}
		s = s[j:]
		v, ok := new(big.Rat).SetString(strings.TrimSuffix(num, "."))
		if !ok {
			return nil, false
		}
		total.Add(total, v.Mul(v, big.NewRat(unit, 1)))
	}
	if neg {
		total.Neg(total)
	}
	return total, true
}

// Value is a pflag.Value holding a time.Duration parsed by Parse, so a flag's
// error says "overflows" with the maximum instead of "invalid duration".
type Value struct{ D *time.Duration }

// String returns the duration in time.Duration's format.
func (v Value) String() string {
	if v.D == nil {
		return "0s"
	}
	return v.D.String()
}

// Set parses s with Parse.
func (v Value) Set(s string) error {
	d, err := Parse(s)
	if err != nil {
		return err
	}
	*v.D = d
	return nil
}

// Type names the value in --help.
func (Value) Type() string { return "duration" }
