//go:build race

package server

// raceDetector is true under -race, whose instrumentation (shadow memory
// for every byte the broker touches) makes memory figures meaningless.
const raceDetector = true
