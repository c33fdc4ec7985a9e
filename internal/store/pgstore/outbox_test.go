package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/pgstore"
)

// openNodeChunked is openNode with tiny inline and chunk limits, so that
// Data of a few dozen bytes goes to chunks.
func openNodeChunked(t *testing.T, url, id string) *pgstore.Store {
	t.Helper()
	o := testOptions()
	o.Cluster, o.NodeID, o.InlineLimit, o.ChunkSize = true, id, 16, 10
	s := open(t, url, o)
	t.Cleanup(func() { s.Close() })
	if _, err := s.Register(context.Background(), store.NodeRegistration{ID: id, Addr: id + ":1", TTL: 30 * time.Second}); err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
	return s
}

func transferOp(source, targetUnit uint64, meta, data string) store.Op {
	return store.Op{Kind: store.OpTransfer, EntityID: source, Meta: []byte(meta), Data: []byte(data),
		Transfer: &store.Transfer{TransferKey: store.TransferKey{TargetUnit: targetUnit}, TargetEntity: targetUnit, Kind: store.TransferForward}}
}

func landOp(entity uint64, x store.Transfer) store.Op {
	return store.Op{Kind: store.OpLand, EntityID: entity, Transfer: &store.Transfer{TransferKey: x.TransferKey}}
}

// TestOutbox: a forward to a unit another node owns removes the message
// from its source and inserts the transfer in one fenced transaction of
// the source; the target reads its transfers in (source, id) order (a
// large one from chunks), lands them by deleting the claimed rows in the
// same transaction as its append, and a second landing of the same row
// is refused whole (the count assertion). The message is in exactly one
// place after every step.
func TestOutbox(t *testing.T) {
	url := newDB(t)
	ctx := context.Background()
	a := openNodeChunked(t, url, "a")
	b := openNodeChunked(t, url, "b")
	if err := commit(a, true, putOp(1), appendOp(1, 1, "one"), appendOp(1, 2, "two"), appendOp(1, 3, strings.Repeat("large ", 10))); err != nil {
		t.Fatal(err)
	}
	if err := commit(b, true, putOp(2)); err != nil {
		t.Fatal(err)
	}
	places := func(seq int64) (src, outbox int64) {
		return queryInt(t, url, `SELECT count(*) FROM bb_msg WHERE unit_id = 1 AND seq = $1`, seq),
			queryInt(t, url, `SELECT count(*) FROM bb_transfer WHERE source_unit = 1 AND meta = $1`, []byte{byte('0' + seq)})
	}
	for seq := uint64(1); seq <= 3; seq++ {
		data := map[uint64]string{1: "one", 2: "two", 3: strings.Repeat("large ", 10)}[seq]
		if err := commit(a, true, store.Op{Kind: store.OpRemove, EntityID: 1, Seq: seq}, transferOp(1, 2, string(rune('0'+seq)), data)); err != nil {
			t.Fatalf("forward %d: %v", seq, err)
		}
		if src, out := places(int64(seq)); src != 0 || out != 1 {
			t.Fatalf("after forwarding %d: %d in the source, %d in the outbox", seq, src, out)
		}
	}
	if n := queryInt(t, url, `SELECT count(*) FROM bb_transfer_body WHERE source_unit = 1`); n != 6 {
		t.Fatalf("%d chunks of the large transfer, want 6", n)
	}
	xs, err := b.PendingTransfers(ctx, 2, 10, 1<<20)
	if err != nil || len(xs) != 3 {
		t.Fatalf("pending: %d, %v", len(xs), err)
	}
	for i, x := range xs {
		if x.SourceUnit != 1 || x.TargetUnit != 2 || x.TargetEntity != 2 || x.Kind != store.TransferForward || string(x.Meta) != string(rune('1'+i)) {
			t.Fatalf("transfer %d: %+v", i, x)
		}
		if i > 0 && x.ID <= xs[i-1].ID {
			t.Fatalf("transfer ids out of order: %d after %d", x.ID, xs[i-1].ID)
		}
	}
	if string(xs[2].Data) != strings.Repeat("large ", 10) || string(xs[0].Data) != "one" {
		t.Fatalf("transfer data %q, %q", xs[0].Data, xs[2].Data)
	}
	if n, err := b.PendingTransfers(ctx, 2, 10, 1); err != nil || len(n) != 1 {
		t.Fatalf("pending within a byte bound: %d, %v", len(n), err)
	}
	if n, err := a.TransferBacklog(ctx, 2, 1); err != nil || n != 2 {
		t.Fatalf("backlog counted to the limit+1: %d, %v", n, err)
	}
	if us, err := b.TransferTargets(ctx, []uint64{1, 2}); err != nil || len(us) != 1 || us[0] != 2 {
		t.Fatalf("targets %v, %v", us, err)
	}
	// Land the first two with the target's own sequence numbers.
	if err := commit(b, true, landOp(2, xs[0]), landOp(2, xs[1]), appendOp(2, 1, "one"), appendOp(2, 2, "two")); err != nil {
		t.Fatalf("land: %v", err)
	}
	if src, out := places(1); src != 0 || out != 0 || queryInt(t, url, `SELECT count(*) FROM bb_msg WHERE unit_id = 2`) != 2 {
		t.Fatal("landed messages not in exactly the target")
	}
	// Landing a claimed row again (two landings racing) applies nothing.
	err = commit(b, true, landOp(2, xs[0]), landOp(2, xs[2]), appendOp(2, 3, "dup"))
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "landed already") {
		t.Fatalf("second landing: %v, want a refusal", err)
	}
	if queryInt(t, url, `SELECT count(*) FROM bb_msg WHERE unit_id = 2 AND seq = 3`) != 0 || queryInt(t, url, `SELECT count(*) FROM bb_transfer`) != 1 {
		t.Fatal("a refused landing changed something")
	}
	if err := commit(b, true, landOp(2, xs[2]), appendOp(2, 3, strings.Repeat("large ", 10))); err != nil {
		t.Fatalf("land the large one: %v", err)
	}
	if queryInt(t, url, `SELECT count(*) FROM bb_transfer_body`) != 0 {
		t.Fatal("a landed transfer's chunks are left")
	}
}

// TestOutboxFenced: a forward by a node whose source unit was taken over
// is refused whole: the message stays in the source (for the new owner)
// and no transfer exists; a landing by a node whose target unit was
// taken over is refused whole too: the transfer stays for the new owner.
func TestOutboxFenced(t *testing.T) {
	url := newDB(t)
	ctx := context.Background()
	a := openNode(t, url, "a")
	b := openNode(t, url, "b")
	c := openNode(t, url, "c")
	if err := commit(a, true, putOp(1), appendOp(1, 1, "one"), appendOp(1, 2, "two")); err != nil {
		t.Fatal(err)
	}
	if err := commit(b, true, putOp(2)); err != nil {
		t.Fatal(err)
	}
	if err := commit(a, true, store.Op{Kind: store.OpRemove, EntityID: 1, Seq: 1}, transferOp(1, 2, "1", "one")); err != nil {
		t.Fatal(err)
	}
	expire(t, url, "a")
	if _, err := c.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	err := commit(a, true, store.Op{Kind: store.OpRemove, EntityID: 1, Seq: 2}, transferOp(1, 2, "2", "two"))
	if !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("fenced forward: %v, want ErrNotOwner", err)
	}
	if queryInt(t, url, `SELECT count(*) FROM bb_msg WHERE unit_id = 1 AND seq = 2`) != 1 || queryInt(t, url, `SELECT count(*) FROM bb_transfer`) != 1 {
		t.Fatal("a fenced forward moved its message")
	}
	xs, err := b.PendingTransfers(ctx, 2, 10, 1<<20)
	if err != nil || len(xs) != 1 {
		t.Fatalf("pending %d, %v", len(xs), err)
	}
	expire(t, url, "b")
	if _, err := c.Acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := commit(b, true, landOp(2, xs[0]), appendOp(2, 1, "one")); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("fenced landing: %v, want ErrNotOwner", err)
	}
	if queryInt(t, url, `SELECT count(*) FROM bb_transfer`) != 1 || queryInt(t, url, `SELECT count(*) FROM bb_msg WHERE unit_id = 2`) != 0 {
		t.Fatal("a fenced landing changed something")
	}
	// The new owner of the target lands it.
	if err := c.RecoverUnit(ctx, 2, store.Visitor{}); err != nil {
		t.Fatal(err)
	}
	if err := commit(c, true, landOp(2, xs[0]), appendOp(2, 1, "one")); err != nil {
		t.Fatalf("landing by the new owner: %v", err)
	}
}

// TestOutboxOrphans: a transfer whose target unit was deleted meanwhile
// is an orphan its source takes back (TransferTargets names the source,
// OrphanTransfers returns it, and the source lands it on its own unit).
func TestOutboxOrphans(t *testing.T) {
	url := newDB(t)
	ctx := context.Background()
	a := openNode(t, url, "a")
	b := openNode(t, url, "b")
	if err := commit(a, true, putOp(1), appendOp(1, 1, "one")); err != nil {
		t.Fatal(err)
	}
	if err := commit(b, true, putOp(2)); err != nil {
		t.Fatal(err)
	}
	if err := commit(a, true, store.Op{Kind: store.OpRemove, EntityID: 1, Seq: 1}, transferOp(1, 2, "1", "one")); err != nil {
		t.Fatal(err)
	}
	if xs, err := a.OrphanTransfers(ctx, []uint64{1}, 10); err != nil || len(xs) != 0 {
		t.Fatalf("orphans while the target lives: %v, %v", xs, err)
	}
	if err := commit(b, true, store.Op{Kind: store.OpDeleteEntity, EntityID: 2}); err != nil {
		t.Fatal(err)
	}
	if us, err := a.TransferTargets(ctx, []uint64{1}); err != nil || len(us) != 1 || us[0] != 1 {
		t.Fatalf("targets after the target's deletion: %v, %v", us, err)
	}
	xs, err := a.OrphanTransfers(ctx, []uint64{1}, 10)
	if err != nil || len(xs) != 1 || xs[0].TargetUnit != 2 || string(xs[0].Data) != "one" {
		t.Fatalf("orphans: %+v, %v", xs, err)
	}
	if err := commit(a, true, landOp(1, xs[0]), appendOp(1, 2, "one")); err != nil {
		t.Fatalf("taking an orphan back: %v", err)
	}
	if queryInt(t, url, `SELECT count(*) FROM bb_transfer`) != 0 {
		t.Fatal("the orphan is still in the outbox")
	}
}

// TestOutboxCrash: PostgreSQL is killed (immediate shutdown, crash
// recovery on restart) while node a forwards messages of unit 1 into the
// outbox and node b lands them into unit 2, each step its own commit.
// Afterwards every message is in exactly one place: the source, the
// outbox or the target; never in two, never in none.
func TestOutboxCrash(t *testing.T) {
	url := newDB(t)
	ctx := context.Background()
	const n = 400
	open := func(id string) *pgstore.Store {
		o := testOptions()
		o.Cluster, o.NodeID, o.TxnDeadline, o.ResolveWait = true, id, time.Second, time.Second
		s := open(t, url, o)
		t.Cleanup(func() { s.Close() })
		if _, err := s.Register(ctx, store.NodeRegistration{ID: id, Addr: id + ":1", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := open("a"), open("b")
	ops := []store.Op{putOp(1)}
	for seq := uint64(1); seq <= n; seq++ {
		ops = append(ops, appendOp(1, seq, fmt.Sprint(seq)))
	}
	if err := commit(a, true, ops...); err != nil {
		t.Fatal(err)
	}
	if err := commit(b, true, putOp(2)); err != nil {
		t.Fatal(err)
	}
	count := func(q string, args ...any) (int64, error) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, url)
		if err != nil {
			return 0, err
		}
		defer conn.Close(cctx)
		var n int64
		err = conn.QueryRow(cctx, q, args...).Scan(&n)
		return n, err
	}
	// retake takes unit again after the store gave it up (an unknown
	// outcome, §6.3), as the node would; the loops then reload.
	retake := func(s *pgstore.Store, unit uint64) {
		if !s.Holds(unit) {
			s.Acquire(ctx, unit)
		}
	}
	var forwarded atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the source's forwarder
		defer wg.Done()
		for seq := uint64(1); seq <= n; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			s := fmt.Sprint(seq)
			if err := commit(a, true, store.Op{Kind: store.OpRemove, EntityID: 1, Seq: seq}, transferOp(1, 2, s, s)); err != nil {
				time.Sleep(10 * time.Millisecond)
				retake(a, 1)
				// As a reload would: forward it again only if it is still
				// in the source (an unknown outcome may have applied).
				if n, err := count(`SELECT count(*) FROM bb_msg WHERE unit_id = 1 AND seq = $1`, int64(seq)); err != nil || n == 1 {
					seq--
					continue
				}
			}
			forwarded.Add(1)
		}
	}()
	go func() { // the target's landing loop
		defer wg.Done()
		next := uint64(1)
		for {
			select {
			case <-stop:
				return
			default:
			}
			xs, err := b.PendingTransfers(ctx, 2, 16, 1<<20)
			if err != nil || len(xs) == 0 {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			ops := make([]store.Op, 0, 2*len(xs))
			for i, x := range xs {
				ops = append(ops, landOp(2, x), appendOp(2, next+uint64(i), string(x.Data)))
			}
			if err := commit(b, true, ops...); err != nil {
				// As a reload would: the target's sequence numbers from
				// the database (an unknown outcome may have applied).
				time.Sleep(10 * time.Millisecond)
				retake(b, 2)
				if n, err := count(`SELECT coalesce(max(seq), 0) FROM bb_msg WHERE unit_id = 2`); err == nil {
					next = uint64(n) + 1
				}
				continue
			}
			next += uint64(len(xs))
		}
	}()
	landed := func() int64 {
		n, _ := count(`SELECT count(*) FROM bb_msg WHERE unit_id = 2`)
		return n
	}
	waitFor(t, "forwards and landings before the crash", 20*time.Second, func() bool { return landed() > 50 })
	if err := srv.Crash(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// A store that could not learn a commit's outcome gives its units up
	// (§6.3): the loops take them again, as the node would, and finish.
	waitFor(t, "every message landed", 60*time.Second, func() bool { return forwarded.Load() == n && landed() == n })
	close(stop)
	wg.Wait()
	where := map[string]int{}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		`SELECT data FROM bb_msg WHERE unit_id = 1 AND entity_id = 1`,
		`SELECT data FROM bb_transfer WHERE target_unit = 2`,
		`SELECT data FROM bb_msg WHERE unit_id = 2 AND entity_id = 2`,
	} {
		rows, err := conn.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var d []byte
			if err := rows.Scan(&d); err != nil {
				t.Fatal(err)
			}
			where[string(d)]++
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
	}
	for seq := 1; seq <= n; seq++ {
		if c := where[fmt.Sprint(seq)]; c != 1 {
			t.Errorf("message %d is in %d places", seq, c)
		}
	}
	// And in the target in the source's order.
	rows, err := conn.Query(ctx, `SELECT data FROM bb_msg WHERE unit_id = 2 AND entity_id = 2 ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	want := 1
	for rows.Next() {
		var d []byte
		rows.Scan(&d)
		if string(d) != fmt.Sprint(want) {
			t.Fatalf("target message %d is %s: out of order", want, d)
		}
		want++
	}

}

// TestOutboxTransferWithMore: a transfer whose Data comes in two pieces
// (store.Op.More) is stored as the joined Data, inline and in chunks.
func TestOutboxTransferWithMore(t *testing.T) {
	url := newDB(t)
	ctx := context.Background()
	a := openNodeChunked(t, url, "a")
	b := openNodeChunked(t, url, "b")
	if err := commit(a, true, putOp(1)); err != nil {
		t.Fatal(err)
	}
	if err := commit(b, true, putOp(2)); err != nil {
		t.Fatal(err)
	}
	small, large := transferOp(1, 2, "1", "he"), transferOp(1, 2, "2", "head:")
	small.More, large.More = []byte("ad"), []byte(strings.Repeat("body ", 20))
	if err := commit(a, true, small, large); err != nil {
		t.Fatal(err)
	}
	xs, err := b.PendingTransfers(ctx, 2, 10, 1<<20)
	if err != nil || len(xs) != 2 {
		t.Fatalf("pending: %d, %v", len(xs), err)
	}
	if string(xs[0].Data) != "head" || string(xs[1].Data) != "head:"+strings.Repeat("body ", 20) {
		t.Fatalf("transfer data %q, %q", xs[0].Data, xs[1].Data)
	}
}
