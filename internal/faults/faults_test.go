package faults

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type countObs map[string]int

func (c countObs) FaultInjected(kind string) { c[kind]++ }

func TestTakeCountSkipAndExpiry(t *testing.T) {
	clk := clock.NewFake(t0)
	obs := countObs{}
	s := New(clk, nil, obs)
	r, err := s.Add(Spec{Kind: ServerBusy, Entity: "Orders", Count: 2, Skip: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.ID == "" || r.Op != OpSend || time.Duration(r.RetryAfter) != DefaultRetryAf || !r.Expires.Equal(t0.Add(DefaultTTL)) {
		t.Fatalf("defaults: %+v", r)
	}
	send := Point{Op: OpSend, Entity: "orders"}
	if f := s.Take(Point{Op: OpSettle, Entity: "orders"}); f != nil {
		t.Fatalf("settle matched a send rule: %+v", f)
	}
	if f := s.Take(Point{Op: OpSend, Entity: "other"}); f != nil {
		t.Fatalf("other entity matched: %+v", f)
	}
	if f := s.Take(send); f != nil {
		t.Fatalf("skip 1: first send faulted")
	}
	for i := range 2 {
		f := s.Take(send)
		if f == nil || f.Kind != ServerBusy || f.Rule != r.ID {
			t.Fatalf("send %d: %+v", i, f)
		}
		e := f.Err()
		if !strings.Contains(e.Msg, "Please wait 2 seconds") || !strings.Contains(e.Msg, r.ID) {
			t.Fatalf("message %q", e.Msg)
		}
	}
	if f := s.Take(send); f != nil || len(s.List()) != 0 {
		t.Fatalf("rule outlived its count: %+v %v", f, s.List())
	}
	if obs["server-busy"] != 2 || s.Injected()[ServerBusy] != 2 {
		t.Fatalf("counted %v %v", obs, s.Injected())
	}

	// Expiry on the injected clock.
	if _, err := s.Add(Spec{Kind: LockLost, Entity: "*", TTL: Duration(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(59 * time.Second)
	if len(s.List()) != 1 {
		t.Fatal("expired early")
	}
	clk.Advance(time.Second)
	if len(s.List()) != 0 || s.Take(Point{Op: OpSettle, Entity: "q"}) != nil {
		t.Fatal("did not expire")
	}
}

func TestMatching(t *testing.T) {
	s := New(clock.NewFake(t0), nil, nil)
	mustAdd := func(sp Spec) Rule {
		t.Helper()
		r, err := s.Add(sp)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	mustAdd(Spec{Kind: Detach, Entity: "t/Subscriptions/s", Op: OpReceive, Link: "L1", Count: 100})
	mustAdd(Spec{Kind: DropFrame, Entity: "q", Property: "kind=bad", Count: 100})
	if f := s.Take(Point{Op: OpReceive, Entity: "T/subscriptions/S", Link: "L2"}); f != nil {
		t.Fatal("other link matched")
	}
	if f := s.Take(Point{Op: OpReceive, Entity: "T/subscriptions/S", Link: "L1"}); f == nil || f.Condition != "amqp:link:detach-forced" {
		t.Fatalf("link rule: %+v", f)
	}
	if f := s.Take(Point{Op: OpReceive, Entity: "q", Props: []map[string]any{{"kind": "good"}}}); f != nil {
		t.Fatal("property mismatch matched")
	}
	if f := s.Take(Point{Op: OpReceive, Entity: "q/$DeadLetterQueue", Props: []map[string]any{{"x": 1}, {"kind": "bad"}}}); f == nil || f.Kind != DropFrame {
		t.Fatalf("property rule on the DLQ: %+v", f)
	}
	if f := s.Take(Point{Op: OpReceive, Entity: "qq", Props: []map[string]any{{"kind": "bad"}}}); f != nil {
		t.Fatal("prefix of another name matched")
	}
	mustAdd(Spec{Kind: LockLost, Entity: "q", Op: OpManagement})
	if f := s.Take(Point{Op: OpManagement, Entity: "q", Kinds: []Kind{ServerBusy}}); f != nil {
		t.Fatal("a kind left out by the point matched")
	}
	if f := s.Take(Point{Op: OpManagement, Entity: "q", Kinds: []Kind{LockLost}}); f == nil {
		t.Fatal("lock-lost on management did not match")
	}
	if n := s.Clear("F1"); n != 1 || len(s.List()) != 1 {
		t.Fatalf("clear by id: %d %v", n, s.List())
	}
	if n := s.Clear(""); n != 1 || len(s.List()) != 0 {
		t.Fatalf("clear all: %d", n)
	}
}

func TestValidation(t *testing.T) {
	s := New(clock.NewFake(t0), nil, nil)
	for _, sp := range []Spec{
		{Kind: "nope", Entity: "q"},
		{Kind: LockLost},
		{Kind: LockLost, Entity: "q", Op: OpSend},
		{Kind: LockLost, Entity: "q", Property: "a=b"},
		{Kind: DropFrame, Entity: "q", Property: "novalue"},
		{Kind: ServerBusy, Entity: "q", Count: -1},
		{Kind: ServerBusy, Entity: "q", Count: MaxCount + 1},
		{Kind: ServerBusy, Entity: "q", TTL: Duration(25 * time.Hour)},
		{Kind: ServerBusy, Entity: "q", Condition: "amqp:x"},
		{Kind: Delay, Entity: "q"},
		{Kind: Delay, Entity: "q", Delay: Duration(time.Hour)},
		{Kind: Detach, Entity: "q", Condition: "not a symbol"},
		{Kind: LockLost, Entity: "q", RetryAfter: Duration(time.Second)},
		{Kind: StoreError, Entity: "q", Link: "l"},
	} {
		if _, err := s.Add(sp); !IsValidation(err) {
			t.Errorf("%+v: %v", sp, err)
		}
	}
	for range MaxRules {
		if _, err := s.Add(Spec{Kind: LockLost, Entity: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Add(Spec{Kind: LockLost, Entity: "q"}); !IsValidation(err) {
		t.Fatalf("rule %d accepted: %v", MaxRules+1, err)
	}
}

func TestSpecJSON(t *testing.T) {
	var sp Spec
	if err := json.Unmarshal([]byte(`{"kind":"delay","entity":"q","delay":"1.5s","ttl":60000}`), &sp); err != nil {
		t.Fatal(err)
	}
	if time.Duration(sp.Delay) != 1500*time.Millisecond || time.Duration(sp.TTL) != time.Minute {
		t.Fatalf("%+v", sp)
	}
	if err := json.Unmarshal([]byte(`{"delay":"soon"}`), &sp); err == nil {
		t.Fatal("bad duration accepted")
	}
	b, _ := json.Marshal(Spec{Delay: Duration(2 * time.Second)})
	if !strings.Contains(string(b), `"delay":"2s"`) {
		t.Fatalf("%s", b)
	}
}

func TestStoreWrapper(t *testing.T) {
	s := New(clock.NewFake(t0), nil, nil)
	s.SetResolver(func(name string) (uint64, bool) { return 7, strings.EqualFold(name, "q") })
	st := WrapStore(memstore.New(), s)
	defer st.Close()
	appendOp := func(id uint64) *store.Batch {
		return &store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: id, Name: "x"}, {Kind: store.OpAppend, EntityID: id, Seq: 1, Meta: []byte{1}}}}
	}
	if _, err := s.Add(Spec{Kind: StoreError, Entity: "q"}); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(appendOp(8), true); err != nil {
		t.Fatalf("other entity: %v", err)
	}
	if err := st.Commit(appendOp(7), false); err != nil {
		t.Fatalf("background commit failed: %v", err)
	}
	err := st.Commit(appendOp(7), true)
	if !errors.Is(err, store.ErrFailed) {
		t.Fatalf("injected: %v", err)
	}
	if err := st.Commit(appendOp(7), true); err != nil {
		t.Fatalf("after the fault: %v", err)
	}
	if _, ok := st.(store.DiskChecker); !ok {
		t.Fatal("the wrapper hides DiskChecker")
	}
	if WrapStore(st, nil) != st {
		t.Fatal("nil set wraps")
	}
}
