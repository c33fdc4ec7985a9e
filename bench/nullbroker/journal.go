package nullbroker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// Journal makes the null broker durable at the least cost a durable
// broker can pay per message: what it must keep — every accepted
// transfer's payload, every completed delivery's tag — is appended to one
// file, and a settlement goes out only after an fdatasync that covers it.
// One goroutine writes and syncs in groups (group commit): each round
// takes everything that arrived while the previous one ran, writes it
// with one pwrite and syncs it with one fdatasync, without waiting for
// more. There is no record format, no index, and nothing is read back.
//
// The file is zero-filled and synced when the journal opens, and written
// round and round (its whole size, then from offset 0 again), so a sync
// never has to allocate blocks or change the file's size — as a durable
// broker's preallocated segments.
//
//	journal file:  | payload | tag | payload | payload | … | → wraps to offset 0
//
// A retaining journal (OpenRetainingJournal, busbar-null --sync DIR
// --retain, the target null-durable-retain) keeps everything instead, as a
// broker that keeps what it is sent must (plainly: the next file is
// zero-filled at once, not paced): a full file is synced and left
// as it is, and writing goes on in the next one, which a goroutine of the
// journal's has created, zero-filled and synced meanwhile (as Busbar
// prepares its next segment), and whose name it has made durable. A full
// file's pages are dropped from the page cache (nothing reads it back).
//
//	null-journal-000001 (full) | null-journal-000002 (being written) | null-journal-000003 (prepared)
type Journal struct {
	f    *os.File
	fd   int
	size int64
	off  int64 // next write, owned by run

	// A retaining journal's next file: asked for on prepReq, handed over
	// on prepc by the preparer goroutine (prepDone closed when it exits).
	retain   bool
	dir      string
	next     int // number of the next file to prepare, owned by the preparer
	prepReq  chan struct{}
	prepc    chan prepared
	prepDone chan struct{}

	mu   sync.Mutex
	pend []jentry
	err  error // the first write or sync error; nothing is settled after it

	wake chan struct{}
	stop chan struct{}
	done chan struct{}

	Syncs atomic.Int64 // fdatasync rounds
	Bytes atomic.Int64 // bytes written
}

// jentry is one thing to keep: an accepted transfer (in) or a complete
// (out), and the bytes that stand for it.
type jentry struct {
	in   *amqp.IncomingDelivery
	out  *amqp.OutgoingDelivery
	data []byte
	// then, when set, runs once in is synced, before it is settled: nil
	// settles it Accepted, a state settles it with that state.
	then func() frames.DeliveryState
}

// DefaultJournalSize is the journal file's size: 64 MiB.
const DefaultJournalSize = 64 << 20

// OpenJournal creates (or truncates) the journal file in dir, size bytes
// (DefaultJournalSize when 0), zero-filled and synced, and starts its
// writer. Close stops it.
func OpenJournal(dir string, size int64) (*Journal, error) {
	if size <= 0 {
		size = DefaultJournalSize
	}
	f, err := zeroFile(filepath.Join(dir, "null-journal"), size)
	if err != nil {
		return nil, err
	}
	j := &Journal{f: f, fd: int(f.Fd()), size: size, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go j.run()
	return j, nil
}

// OpenRetainingJournal opens a journal that keeps everything: files of
// size bytes (DefaultJournalSize when 0) in dir, numbered from 1, each
// prepared ahead of use (see Journal). Close stops its goroutines.
func OpenRetainingJournal(dir string, size int64) (*Journal, error) {
	if size <= 0 {
		size = DefaultJournalSize
	}
	j := &Journal{size: size, retain: true, dir: dir, next: 1, wake: make(chan struct{}, 1), stop: make(chan struct{}),
		done: make(chan struct{}), prepReq: make(chan struct{}, 1), prepc: make(chan prepared, 1), prepDone: make(chan struct{})}
	p := j.prepare()
	if p.err != nil {
		return nil, p.err
	}
	j.f, j.fd = p.f, int(p.f.Fd())
	go j.prepLoop()
	j.prepReq <- struct{}{}
	go j.run()
	return j, nil
}

// prepared is a retaining journal's next file, or why there is none.
type prepared struct {
	f   *os.File
	err error
}

// prepLoop is the preparer: one file per request, until prepReq closes.
func (j *Journal) prepLoop() {
	defer close(j.prepDone)
	for range j.prepReq {
		j.prepc <- j.prepare()
	}
	select {
	case p := <-j.prepc:
		if p.f != nil {
			p.f.Close()
		}
	default:
	}
}

// prepare creates, zero-fills and syncs the next file, and syncs dir.
func (j *Journal) prepare() prepared {
	f, err := zeroFile(filepath.Join(j.dir, fmt.Sprintf("null-journal-%06d", j.next)), j.size)
	if err != nil {
		return prepared{err: err}
	}
	j.next++
	d, err := os.Open(j.dir)
	if err == nil {
		err = d.Sync()
		d.Close()
	}
	if err != nil {
		f.Close()
		return prepared{err: err}
	}
	return prepared{f: f}
}

// zeroFile creates (or truncates) name, size bytes of zeros, synced.
func zeroFile(name string, size int64) (*os.File, error) {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	zero := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(zero)) {
		n := min(int64(len(zero)), size-off)
		if _, err := f.WriteAt(zero[:n], off); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// nextFile moves a retaining journal to its prepared file: the full one
// is synced (the round's fdatasync covers only the file it ends in), its
// pages dropped and closed.
func (j *Journal) nextFile() error {
	if err := syscall.Fdatasync(j.fd); err != nil {
		return err
	}
	_ = unix.Fadvise(j.fd, 0, 0, unix.FADV_DONTNEED)
	p := <-j.prepc
	j.prepReq <- struct{}{}
	if p.err != nil {
		return p.err
	}
	j.f.Close()
	j.f, j.fd, j.off = p.f, int(p.f.Fd()), 0
	return nil
}

// errJournalClosed settles what arrives after Close: rejected, never
// accepted without a sync.
var errJournalClosed = errors.New("null broker: journal closed")

// Accept keeps d's payload and settles d Accepted once it is synced.
func (j *Journal) Accept(d *amqp.IncomingDelivery) {
	j.add(jentry{in: d, data: d.Payload})
}

// AcceptThen keeps d's payload and, once it is synced, calls then (in
// the journal's order) and settles d Accepted, or with the state then
// returns.
func (j *Journal) AcceptThen(d *amqp.IncomingDelivery, then func() frames.DeliveryState) {
	j.add(jentry{in: d, data: d.Payload, then: then})
}

// Complete keeps d's tag and settles d Accepted once it is synced.
func (j *Journal) Complete(d *amqp.OutgoingDelivery) {
	j.add(jentry{out: d, data: d.Tag})
}

func (j *Journal) add(e jentry) {
	j.mu.Lock()
	if err := j.err; err != nil {
		j.mu.Unlock()
		reject(e, err)
		return
	}
	j.pend = append(j.pend, e)
	j.mu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

// Close stops the writer after the round in progress; what has not been
// synced by then is rejected.
func (j *Journal) Close() error {
	close(j.stop)
	<-j.done
	if j.retain {
		close(j.prepReq)
		<-j.prepDone
	}
	j.mu.Lock()
	pend := j.pend
	j.pend = nil
	if j.err == nil {
		j.err = errJournalClosed
	}
	j.mu.Unlock()
	for _, e := range pend {
		reject(e, errJournalClosed)
	}
	return j.f.Close()
}

func reject(e jentry, err error) {
	state := &frames.Rejected{Error: &frames.Error{Condition: frames.ErrCondInternalError, Description: err.Error()}}
	if e.in != nil {
		e.in.Settle(state)
	} else {
		e.out.Settle(state)
	}
}

// run is the writer: one pwrite and one fdatasync per round, then the
// round's settlements, Accepted, one SettleAll per link (a link's group
// leaves as one disposition per run of delivery ids, as Busbar's do).
// After a failed write or sync nothing more is accepted: what is pending
// and what comes later is rejected.
func (j *Journal) run() {
	defer close(j.done)
	var (
		buf    []byte
		batch  []jentry
		ins    []linkGroup[*amqp.IncomingLink, *amqp.IncomingDelivery]
		outs   []linkGroup[*amqp.OutgoingLink, *amqp.OutgoingDelivery]
		states []frames.DeliveryState // accepted, as many as the largest outs group
	)
	accepted := &frames.Accepted{}
	for {
		select {
		case <-j.stop:
			return
		case <-j.wake:
		}
		for {
			select {
			case <-j.stop: // Close rejects what is still pending
				return
			default:
			}
			j.mu.Lock()
			batch, j.pend = j.pend, batch[:0]
			err := j.err
			j.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			if err == nil {
				buf = buf[:0]
				for _, e := range batch {
					buf = append(buf, e.data...)
				}
				if err = j.write(buf); err == nil {
					err = syscall.Fdatasync(j.fd)
				}
				if err != nil {
					err = fmt.Errorf("null broker: journal: %w", err)
					j.mu.Lock()
					j.err = err
					j.mu.Unlock()
				}
			}
			if err != nil {
				for _, e := range batch {
					reject(e, err)
				}
				clear(batch)
				continue
			}
			j.Syncs.Add(1)
			j.Bytes.Add(int64(len(buf)))
			for _, e := range batch {
				if e.then != nil {
					if st := e.then(); st != nil {
						e.in.Settle(st)
						continue
					}
				}
				if e.in != nil {
					ins = addTo(ins, e.in.Link, e.in)
				} else {
					outs = addTo(outs, e.out.Link(), e.out)
				}
			}
			for i := range ins {
				ins[i].l.SettleAll(ins[i].ds, accepted)
				clear(ins[i].ds)
			}
			for i := range outs {
				for len(states) < len(outs[i].ds) {
					states = append(states, accepted)
				}
				outs[i].l.SettleAll(outs[i].ds, states[:len(outs[i].ds)])
				clear(outs[i].ds)
			}
			ins, outs = ins[:0], outs[:0]
			clear(batch)
		}
	}
}

// linkGroup gathers one round's settlements of one link (a round has a
// few links: a linear search finds them); its slices are reused from
// round to round.
type linkGroup[L comparable, D any] struct {
	l  L
	ds []D
}

func addTo[L comparable, D any](gs []linkGroup[L, D], l L, d D) []linkGroup[L, D] {
	for i := range gs {
		if gs[i].l == l {
			gs[i].ds = append(gs[i].ds, d)
			return gs
		}
	}
	if len(gs) < cap(gs) { // a slot of an earlier round
		gs = gs[:len(gs)+1]
		g := &gs[len(gs)-1]
		g.l, g.ds = l, append(g.ds[:0], d)
		return gs
	}
	return append(gs, linkGroup[L, D]{l: l, ds: []D{d}})
}

// write writes b at the journal's offset, wrapping at its size (a
// retaining journal goes on in its next file instead).
func (j *Journal) write(b []byte) error {
	for len(b) > 0 {
		if j.off == j.size {
			if !j.retain {
				j.off = 0
			} else if err := j.nextFile(); err != nil {
				return err
			}
		}
		n := min(int64(len(b)), j.size-j.off)
		if _, err := j.f.WriteAt(b[:n], j.off); err != nil {
			return err
		}
		j.off += n
		b = b[n:]
	}
	return nil
}
