package store

import (
	"errors"
	"io"
	"time"
)

// Optional capabilities. A Store may implement any of these; callers test
// for them with a type assertion, so the base interface stays small.

// Stats is a point-in-time summary of what a store holds.
type Stats struct {
	Entities  int   // live entities
	Messages  int   // live messages
	Values    int   // live values
	DataBytes int64 // sum of len(Data) over live messages
	// DiskBytes is the space the store's files take (segments and
	// checkpoints); 0 for stores that keep nothing on disk.
	DiskBytes int64
}

// StatsReporter is implemented by stores that can summarise their contents.
type StatsReporter interface {
	Stats() Stats
}

// Compacter is implemented by stores that reclaim space in the background
// and can also be asked to do a full pass now (tests, admin commands).
// Compact returns once the pass is done; it does not block concurrent
// Commits for long.
type Compacter interface {
	Compact() error
}

// SyncObserver is told of a store's group commits (for metrics): each
// fsync round, how long its syncs took and how many commits it made
// durable. It is called on the store's syncer goroutine, so it must be
// fast and must not call back into the store.
type SyncObserver interface {
	Synced(d time.Duration, commits int)
}

// DiskChecker is implemented by stores that keep their data on a disk
// that can fill up or fail.
type DiskChecker interface {
	// CheckGrowth tells whether new data (a send, a new entity) should be
	// taken now: nil, or a *NoSpaceError while the disk's free space is
	// below the low-disk watermark, or the error that stopped the store
	// (ErrFailed). Settlements are not asked: they free space. It is cheap
	// (the free space is looked up at most every few hundred
	// milliseconds).
	CheckGrowth() error
	// Health is nil while the store takes writes; otherwise why not: a
	// *NoSpaceError while the disk is full (the last write failed for
	// lack of space) or below the watermark, or the ErrFailed error.
	Health() error
}

// DataReader reads the Data of one message a piece at a time (see
// DataOpener). It is not safe for concurrent use; Close releases it and
// may be called more than once.
type DataReader interface {
	// ReadAt reads len(p) bytes of Data from off, as io.ReaderAt. A
	// reader that finds the Data damaged fails with an error wrapping
	// ErrCorrupt: an implementation that checks a checksum does so when
	// the Data has been read through in order, so the last piece's read
	// may be the one that fails.
	ReadAt(p []byte, off int64) (int, error)
	// Size is len(Data).
	Size() int64
	Close() error
}

// DataSection is implemented by an Op.Tail that is a section of Data
// the same store handed out (DataOpener.OpenData): the n bytes at off of
// r. A store may then make the new Data refer to those bytes where they
// lie instead of copying them (a large message dead-lettered or
// forwarded keeps its body); any other store just reads the Tail. r is
// nil if the Tail is not such a section.
type DataSection interface {
	DataSection() (r DataReader, off, n int64)
}

// DataOpener is implemented by stores that can hand out a message's Data
// without reading it whole into memory (large messages are sent to
// receivers a frame at a time). The reader stays valid after the message
// is removed, until it is closed.
type DataOpener interface {
	// OpenData opens the Data of message (entityID, seq); ErrNotFound if
	// there is no such message.
	OpenData(entityID, seq uint64) (DataReader, error)
}

// OpenData opens the Data of message (entityID, seq) with st's OpenData,
// or, for a store without one, reads it whole and reads from that.
func OpenData(st Store, entityID, seq uint64) (DataReader, error) {
	if o, ok := st.(DataOpener); ok {
		return o.OpenData(entityID, seq)
	}
	d, err := st.ReadData(entityID, seq)
	if err != nil {
		return nil, err
	}
	return BytesReader(d), nil
}

// BytesReader is a DataReader of data held in memory.
func BytesReader(data []byte) DataReader { return &bytesReader{data} }

type bytesReader struct{ b []byte }

func (r *bytesReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("store: negative offset")
	}
	if off >= int64(len(r.b)) {
		return 0, io.EOF
	}
	n := copy(p, r.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (r *bytesReader) Size() int64  { return int64(len(r.b)) }
func (r *bytesReader) Close() error { return nil }

// Spooler is implemented by stores that can keep a large incoming
// message on disk while it arrives, before it is sent: its Data then
// reaches Commit as an Op.Tail reading from the spool.
// NewSpool returns ErrNoSpools when the store behind it (a wrapper's)
// keeps none: the message is then kept in memory as it arrives.
type Spooler interface {
	NewSpool() (Spool, error)
}

// ErrNoSpools is NewSpool's answer from a store that keeps no spools.
var ErrNoSpools = errors.New("store: keeps no spools")

// Spool is a temporary file: Write appends, ReadAt and Size read back
// what was written, Close deletes it. Spools are not durable and do not
// survive a restart.
type Spool interface {
	Write(p []byte) error
	DataReader
}
