//go:build !race

package redlock_test

// raceEnabled says the tests run with the race detector, under which
// sync.Pool drops a quarter of the values put back, at random.
const raceEnabled = false
