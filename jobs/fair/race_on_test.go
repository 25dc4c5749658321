//go:build race

package fair

// raceEnabled: the simulation runs one seed under the race detector (ten
// times slower), all of them without.
const raceEnabled = true
