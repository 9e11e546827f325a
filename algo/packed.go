package algo

// PackedWords returns how many int64 words State.Pack writes for a State of
// Kind k, the fixed-size form a store keeps per key instead of the 48-byte
// State: 1 for GCRA (the TAT), 2 for TokenBucket (missing tokens*Period, last
// refill) and FixedWindow (window start, count), 3 for SlidingWindowCounter
// (window start, prev, cur). It returns 0 for the Kinds whose state has no
// fixed size (SlidingWindowLog's log, BucketedSlidingWindow's buckets) and for
// invalid Kinds: keep those as a State, or, while small, in the three words of
// State.PackLog or State.PackBucketed.
func (k Kind) PackedWords() int {
	switch k {
	case GCRA:
		return 1
	case TokenBucket, FixedWindow:
		return 2
	case SlidingWindowCounter:
		return 3
	}
	return 0
}

// Pack writes the state of s into w[:s.Kind().PackedWords()] and leaves the
// rest of w alone; UnpackState reads it back. It does nothing for a State
// whose Kind has no packed form (PackedWords 0) and panics if w is shorter
// than PackedWords. The caches State keeps to skip a division (see State) are
// not packed: an unpacked State recomputes them on its next Take.
func (s *State) Pack(w []int64) {
	switch s.kind.PackedWords() {
	case 1:
		w[0] = s.a
	case 2:
		w[0], w[1] = s.a, s.b
	case 3:
		w[0], w[1], w[2] = s.a, s.b, s.c
	}
}

// UnpackState returns the State of Kind k that Pack wrote to w, for a k with
// PackedWords > 0; for any other k it returns the zero State (which Take
// starts fresh). w must come from Pack for the same Kind: UnpackState does not
// validate it (use MarshalBinary for state that crosses a trust boundary).
//
// hint is, for GCRA, the emission interval Period/Limit (ns, rounded down) of
// the Limit the next Take will get, or 0 if the caller does not know it: a
// right hint saves Take a 64-bit division, a wrong one is detected (by a
// multiplication) and costs only that division. Other Kinds ignore it.
func UnpackState(k Kind, w []int64, hint int64) State {
	switch k.PackedWords() {
	case 1:
		return State{kind: k, a: w[0], b: hint}
	case 2:
		return State{kind: k, a: w[0], b: w[1]}
	case 3:
		return State{kind: k, a: w[0], b: w[1], c: w[2]}
	}
	return State{}
}
