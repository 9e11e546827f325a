//go:build !race

package daemon

// raceEnabled: the race detector is on (its shadow memory inflates RSS).
const raceEnabled = false
