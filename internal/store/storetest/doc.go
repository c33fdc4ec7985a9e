// Package storetest is the test suite every store.Store implementation
// runs, plus helpers to snapshot a store's whole state and to drive it with
// random batches against a model.
//
// Usage from an implementation's tests:
//
//	func TestSuite(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			New: func(t testing.TB) storetest.Opener {
//				dir := t.TempDir()
//				return func() (store.Store, error) { return filestore.Open(filestore.Options{Dir: dir}) }
//			},
//			Persistent: true,
//		})
//	}
//
// The suite relies only on the store package contract (including the
// operation rules in its package documentation), plus one thing the
// contract leaves open and both implementations allow: Recover may be
// called more than once and after Commits, which the suite uses to read
// the whole state back.
package storetest
