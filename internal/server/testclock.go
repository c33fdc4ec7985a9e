package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/vfs"
)

// testClockFile, in a namespace's data directory, holds how far its test
// clock (--test-clock) is ahead of the wall clock, so that a broker
// restarted on the same data resumes the test time rather than going
// back to the wall clock:
//
//	{"offset":"2h0m0s","offsetNanoseconds":7200000000000}
//
// Each move is written (atomically, synced) before it is answered. The
// nanoseconds are what is read back; "offset" is for people.
const testClockFile = "test-clock.json"

type testClockState struct {
	Offset            string `json:"offset"`
	OffsetNanoseconds int64  `json:"offsetNanoseconds"`
}

// openTestClock returns the test clock of a namespace whose data live in
// dir ("" for none: the clock starts at the wall clock and saves
// nothing): resumed at the offset saved there, and saving every move.
func openTestClock(base clock.Clock, dir string, log *slog.Logger) (*clock.Test, error) {
	if dir == "" {
		return clock.NewTest(base), nil
	}
	name := filepath.Join(dir, testClockFile)
	off, err := readTestClock(name)
	if err != nil {
		return nil, err
	}
	c, err := clock.NewTestFrom(base, off)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (remove the file to start the test clock at the wall clock)", name, err)
	}
	if off > 0 {
		log.Info("test clock resumed from the data directory", "offset", off.String(), "now", c.Now().UTC().Format(time.RFC3339Nano))
	}
	c.OnSave(func(off time.Duration) error {
		b, _ := json.Marshal(testClockState{Offset: off.String(), OffsetNanoseconds: int64(off)})
		return vfs.WriteFileAtomic(vfs.OS(), name, append(b, '\n'))
	})
	return c, nil
}

// readTestClock reads the offset saved in name: 0 if there is no file.
func readTestClock(name string) (time.Duration, error) {
	b, err := vfs.ReadFile(vfs.OS(), name, 4096)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the test clock's offset: %w", err)
	}
	var st testClockState
	if err := json.Unmarshal(b, &st); err != nil {
		return 0, fmt.Errorf("%s is not the test clock's offset (%v): remove it to start the test clock at the wall clock", name, err)
	}
	return time.Duration(st.OffsetNanoseconds), nil
}

// noteIgnoredTestClock logs that dir holds a saved test clock offset the
// broker, started without --test-clock, does not use.
func noteIgnoredTestClock(dir string, log *slog.Logger) {
	if dir == "" {
		return
	}
	if off, err := readTestClock(filepath.Join(dir, testClockFile)); err == nil && off > 0 {
		log.Warn("the data directory holds a test clock offset from a run with --test-clock; without it the broker runs on the wall clock",
			"offset", off.String(), "file", testClockFile)
	}
}
