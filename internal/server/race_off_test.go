//go:build !race

package server

// raceDetector is true under -race (race_on_test.go).
const raceDetector = false
