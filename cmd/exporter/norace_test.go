//go:build !race

package main

// raceEnabled: this test binary does not run under the race detector.
const raceEnabled = false
