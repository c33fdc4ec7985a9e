//go:build !race

package servicebus_test

// raceDetector is true under -race, whose instrumentation makes memory
// figures meaningless.
const raceDetector = false
