package servicebus_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: the
// handler's per-link goroutines, the server, the broker and the SDK
// clients must all be gone once each test's cleanups ran.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
