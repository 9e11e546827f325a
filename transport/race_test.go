//go:build race

package transport

// raceEnabled: the race detector drops a random share of sync.Pool's Puts,
// so allocation counts of pooled paths are not exact under -race.
const raceEnabled = true
