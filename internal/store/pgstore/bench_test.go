package pgstore_test

import (
	"sync/atomic"
	"testing"

	"github.com/busbarmq/busbar/internal/store"
)

// BenchmarkCommitOneQueue: synced 1 KB appends to one queue from many
// goroutines at once (group commit; one transaction in flight for the
// queue). Reports commits per transaction.
func BenchmarkCommitOneQueue(b *testing.B) {
	url := newDB(b)
	obs := &countingObserver{}
	o := testOptions()
	o.SyncObserver = obs
	s := open(b, url, o)
	defer s.Close()
	if err := s.Commit(&store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: 1}}}, true); err != nil {
		b.Fatal(err)
	}
	data, meta := make([]byte, 1024), make([]byte, 40)
	var seq atomic.Uint64
	b.SetParallelism(64)
	b.SetBytes(1024)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			op := store.Op{Kind: store.OpAppend, EntityID: 1, Seq: seq.Add(1), Meta: meta, Data: data}
			if err := s.Commit(&store.Batch{Ops: []store.Op{op}}, true); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.txns > 0 {
		b.ReportMetric(float64(obs.commits)/float64(obs.txns), "commits/txn")
	}
}
