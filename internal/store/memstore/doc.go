// Package memstore is the in-memory store.Store: nothing is persisted.
//
// It backs the broker's --memory mode and is the reference model the
// filestore is tested against. Every method takes one mutex; Commit deep-
// copies the slices it keeps, so callers may reuse their Batch at once.
//
// There is no on-disk format. In memory:
//
//	entities map[ID] -> { name, spec, lastSeq,
//	                      msgs   map[Seq] -> { meta, data },
//	                      values map[Key] -> value }
package memstore
