package filestore

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/storetest"
	"github.com/busbarmq/busbar/internal/vfs"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv("BUSBAR_FILL_DIR"); dir != "" {
		// Child process of BenchmarkRecover.
		if err := fillMain(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func TestSuiteOS(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t testing.TB) storetest.Opener {
			dir := t.TempDir()
			return func() (store.Store, error) {
				return Open(Options{Dir: dir, SegmentSize: 1 << 20, BackgroundInterval: -1})
			}
		},
		Persistent: true,
	})
}

func TestSuiteMemTinySegments(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t testing.TB) storetest.Opener {
			fs := vfs.NewMem()
			return func() (store.Store, error) {
				return Open(Options{Dir: "/db", FS: fs, SegmentSize: 8 << 10, BackgroundInterval: -1})
			}
		},
		Persistent: true,
	})
}
