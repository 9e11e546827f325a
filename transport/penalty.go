package transport

import (
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/algo"
	pb "github.com/ringlimit/ringlimit/transport/ringlimitv1"
)

// MaxPenaltyDenials is the largest Penalty.Denials (algo.MaxPenaltyDenials,
// 1024): the owner keeps the times of a key's last Denials denied checks, 8
// bytes each.
const MaxPenaltyDenials = algo.MaxPenaltyDenials

// Penalty is a ban rule carried with a check to its key's owner: after Denials
// denied checks of the key within Within, the owner bans the key for Ban, and
// every check of it is denied until the ban ends, whatever the algorithm says.
// The zero Penalty is none.
type Penalty struct {
	// Denials is the number of denied checks that triggers a ban,
	// 1..MaxPenaltyDenials.
	Denials int64
	// Within is the window the denials are counted in (ns), > 0.
	Within time.Duration
	// Ban is how long the key stays banned (ns), > 0.
	Ban time.Duration
}

// IsZero reports whether p is no penalty.
func (p Penalty) IsZero() bool { return p == Penalty{} }

// Validate returns nil for the zero Penalty or one with Denials in
// 1..MaxPenaltyDenials and Within and Ban in (0, algo.MaxDuration]; otherwise
// an *algo.InputError wrapping ErrInvalidCheck that names the field.
func (p Penalty) Validate() error {
	return algo.ValidatePenalty(p.Denials, p.Within, p.Ban, ErrInvalidCheck)
}

// PenaltyState is the ban state of one key, handed from its old owner to its
// new owner with the key.
type PenaltyState struct {
	// Key is the limited key.
	Key string
	// BanUntil is the end of the key's ban (Unix ns); 0 = not banned.
	BanUntil int64
	// Denials are the times (Unix ns) of the key's recent denied checks, oldest
	// first; at most MaxPenaltyDenials.
	Denials []int64
	// Expire is when the state changes no decision any more (Unix ns).
	Expire int64
}

func validatePenaltyState(s PenaltyState, maxKeyLen int) error {
	if err := validateKey(s.Key, maxKeyLen); err != nil {
		return err
	}
	if len(s.Denials) > MaxPenaltyDenials {
		return fmt.Errorf("%w: penalty state of key %q has %d denials, above %d", ErrInvalidCheck, s.Key, len(s.Denials), MaxPenaltyDenials)
	}
	return nil
}

func penaltyStateToWire(s PenaltyState) *pb.PenaltyState {
	return &pb.PenaltyState{Key: []byte(s.Key), BanUntilUnixNs: s.BanUntil, DenialsUnixNs: s.Denials, ExpireUnixNs: s.Expire}
}

func penaltyStateFromWire(m *pb.PenaltyState) PenaltyState {
	return PenaltyState{Key: string(m.GetKey()), BanUntil: m.GetBanUntilUnixNs(), Denials: m.GetDenialsUnixNs(), Expire: m.GetExpireUnixNs()}
}
