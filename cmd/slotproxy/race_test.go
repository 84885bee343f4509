//go:build race

package main

// raceEnabled reports whether the tests run with the race detector, in which
// case the binary under test is built with it too.
const raceEnabled = true
