package memstore_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/memstore"
	"github.com/busbarmq/busbar/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSuite(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(testing.TB) storetest.Opener {
			return func() (store.Store, error) { return memstore.New(), nil }
		},
	})
}
