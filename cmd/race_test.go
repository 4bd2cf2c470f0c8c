//go:build race

package cmd

// raceEnabled: this test binary runs under the race detector.
const raceEnabled = true
