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

func TestTail(t *testing.T) {
	s := memstore.New()
	b := &store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: 1, Name: "q"},
		{Kind: store.OpAppend, EntityID: 1, Seq: 1, Data: []byte("head"), Tail: store.BytesReader([]byte("+tail"))}}}
	if err := s.Commit(b, true); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ReadData(1, 1); err != nil || string(got) != "head+tail" {
		t.Fatalf("ReadData: %q, %v", got, err)
	}
}
