package broker

// Scripted tests of the broker core: testdata/script/*.txt.
//
// A script is a sequence of commands, each followed by the output it must
// produce. It runs against a broker on a memstore and a fake clock that
// starts at t0 and moves only when a script says so, so scripts never
// sleep. Run them with
//
//	go test ./internal/broker/ -run TestScripts
//	go test ./internal/broker/ -run TestScripts/settlement -rewrite   # regenerate expected output
//
// # File format
//
//	# A comment. Comments and blank lines between commands are kept by -rewrite.
//	send q a b ttl=1m
//	----
//	ok
//
// A command is one line: a name, positional words and key=value arguments
// (a value with spaces goes in double quotes: sql="color = 'red'"). The
// line "----" follows it, then the expected output, which ends at the
// first blank line (or the end of the file). An unknown command or
// argument, or a missing "----", fails the test: it is never output.
//
// Times in the output are relative to the clock's current time: lock=+30s
// is a lock that ends 30 seconds from now, expires=-1s a message whose
// time to live ran out a second ago. Errors print as "error: <Kind>: <text>".
//
// # Timers
//
// Whatever becomes due is done at once, as Broker.Run would do it: after
// every command the harness calls Tick while NextDeadline has been
// reached. "advance D" moves the clock forward by D, stopping at every
// deadline on the way to Tick there. "pause" stops that until "resume" or
// the next plain "advance": what the broker then does, it does lazily,
// when an operation meets the due work, or when "tick" calls Tick once.
// "advance D lazy" is pause and a move of the clock.
//
// # Commands
//
// PATH is an entity path as Service Bus writes it: "q", "t",
// "t/Subscriptions/s". Where a sub-queue makes sense, the word dlq or tdlq
// after PATH selects its $DeadLetterQueue or $Transfer/$DeadLetterQueue.
// D is a Go duration (30s, 5m, 1h30m) or inf. SEQS is a comma-separated
// list of sequence numbers. PROPS is k:v,k:v; a value that parses as an
// integer is an int64, true and false are bools, anything else a string.
//
// Entities (each prints ok or the error):
//
//	create-queue NAME [QOPTS]          QOPTS: lock=D max-delivery=N ttl=D
//	update-queue NAME [QOPTS]            dup-window=D auto-delete=D status=S
//	delete-queue NAME                    forward=PATH forward-dlq=PATH max-size-mb=N
//	                                     max-msg-kb=N and the words session,
//	                                     dup-detection, dlq-on-expiry
//	create-topic NAME [ttl=D dup-window=D auto-delete=D status=S max-size-mb=N dup-detection]
//	update-topic NAME [same]
//	delete-topic NAME
//	create-sub TOPIC NAME [QOPTS] [no-filter-dlq] [FILTER]   (FILTER: its $Default rule)
//	update-sub TOPIC NAME [QOPTS] [no-filter-dlq]
//	delete-sub TOPIC NAME
//	add-rule TOPIC SUB RULE FILTER [action="SET …" [action-params=PROPS]]
//	delete-rule TOPIC SUB RULE
//	rules TOPIC SUB                    one line per rule
//
// FILTER is sql="…" (with sql-params=PROPS), the word true or false, or a
// correlation filter built from any of corr-id= msg-id= label= to=
// reply-to= session-id= content-type= corr-props=PROPS.
//
// Messages:
//
//	send PATH BODY… [MOPTS]            one batch, one message per BODY (or body=B);
//	                                   prints ok
//	                                   MOPTS: ttl=D session=ID id=MSGID label=L corr=ID
//	                                   to=X reply-to=X props=PROPS ann=PROPS (annotations)
//	                                   at=D (x-opt-scheduled-enqueue-time, now + D)
//	schedule PATH BODY… at=D [MOPTS]   Broker.Schedule; prints seq=SEQS (at=none: the zero time)
//	cancel PATH seq=SEQS               Broker.CancelScheduled
//	receive PATH|RECV [dlq|tdlq] [n=N] [delete]
//	                                   TryReceive up to N (1) messages, PeekLock
//	                                   or, with delete, ReceiveAndDelete; one line
//	                                   per message, "(none)" if none
//	receive-deferred PATH|RECV [dlq|tdlq] seq=SEQS [session=ID] [delete]
//	                                   (session=: ReceiveDeferredInSession)
//	peek PATH [dlq|tdlq] [from=SEQ] [n=N]   (N: 10)
//	complete|abandon|release|defer PATH [dlq|tdlq] seq=SEQS [token=K] [props=PROPS]
//	dead-letter PATH [dlq|tdlq] seq=SEQS [reason=R] [desc=D] [props=PROPS]
//	renew PATH [dlq|tdlq] seq=SEQS     RenewLock of them all; prints lock=… each
//	state PATH                         a queue's or subscription's non-zero counts
//	                                   (active deferred scheduled dlq transfer tdlq;
//	                                   total if it is not their sum; bytes if no
//	                                   message is left but the size is not 0),
//	                                   "empty" if none; a topic's: scheduled=N subs=N
//
// Settlement uses the lock token of the latest receive of that sequence
// number from that path; token=K picks the K-th one instead (1 = the first),
// to show what an outdated token gets. A settlement of several sequence
// numbers prints one line per number.
//
// A message prints as
//
//	seq=1 body=a dc=1 lock=+30s [session=…] [state=deferred|scheduled]
//	  [scheduled=…] [enqueued=…] [expires=… ttl=…] [id=…] [label=…] [corr=…]
//	  [props=k:v,…] [reason=…] [desc=…] [source=…]
//
// on one line. enqueued is shown when the command has the word enqueued
// (receive, receive-deferred, peek). dc is the delivery count a receiver
// sees, reason and desc the DeadLetterReason and DeadLetterErrorDescription
// properties, source the dead-letter source of a message forwarded out of
// a dead-letter queue. A value that is empty or has spaces or quotes is
// printed in Go quotes.
//
// Sessions. A session receiver is named as=NAME, by default after its
// session (a new receiver of the same name closes the old one); receive
// and receive-deferred take the name instead of a path.
// SESS is a receiver's NAME, or PATH ID for the broker's by-id call.
//
//	accept-session PATH ID [as=NAME] [delete]   prints session=ID lock=…
//	accept-next PATH [as=NAME] [delete]         the same, or "no session available"
//	close NAME                                  close the session receiver
//	renew-session SESS                          prints lock=…
//	set-state SESS [value=V]                    without value= it clears the state
//	get-state SESS                              prints state=V or state=(none)
//	sessions PATH [after=D] [skip=N] [top=N]    ListSessions (after: now + D)
//	peek-session PATH ID [from=SEQ] [n=N]
//
// Time and life:
//
//	advance D [lazy]                   see Timers
//	pause                              no automatic Tick until resume or advance
//	resume                             automatic Ticks again
//	tick                               one Tick
//	deadline                           NextDeadline: deadline=+1m or deadline=none
//	restart                            close the broker and open it again on the
//	                                   same store (session receivers are dropped)

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/script/*.txt with what the scripts produce")

func TestScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "script", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scripts in testdata/script")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			runScriptFile(t, f, *rewrite)
		})
	}
}

// runScriptFile runs one script and reports every mismatch, or with
// rewrite writes the file back with the actual output.
func runScriptFile(t *testing.T, file string, rewrite bool) {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	res, err := runScript(string(src))
	if rewrite && res.rewritten != "" && res.rewritten != string(src) {
		// Even up to a faulty command: its output so far helps fix it.
		if err := os.WriteFile(file, []byte(res.rewritten), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err != nil {
		t.Fatalf("%s:%v", file, err)
	}
	if rewrite {
		return
	}
	for _, m := range res.mismatches {
		t.Errorf("%s:%d: %s\n--- want:\n%s\n--- got:\n%s", file, m.line, m.cmd, m.want, m.got)
	}
}

// A scriptBlock is one command of a script and its expected output.
type scriptBlock struct {
	line     int    // 1-based line of the command
	cmd      string // the command line
	want     string // expected output, lines joined with "\n"
	outStart int    // index in the file's lines of the first output line
	outEnd   int    // index after the last output line
}

// parseScript splits a script into its commands. Comments and blank lines
// between commands are skipped; lines keeps the file for rewriting.
func parseScript(src string) (lines []string, blocks []scriptBlock, err error) {
	lines = strings.Split(strings.TrimSuffix(src, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if l == "----" {
			return nil, nil, fmt.Errorf("%d: \"----\" without a command", i+1)
		}
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "----" {
			return nil, nil, fmt.Errorf("%d: %q is not followed by \"----\"", i+1, l)
		}
		b := scriptBlock{line: i + 1, cmd: l, outStart: i + 2}
		j := i + 2
		for j < len(lines) && strings.TrimSpace(lines[j]) != "" {
			j++
		}
		b.outEnd = j
		b.want = strings.Join(lines[b.outStart:j], "\n")
		blocks = append(blocks, b)
		i = j
	}
	return lines, blocks, nil
}

type scriptMismatch struct {
	line           int
	cmd, want, got string
}

type scriptResult struct {
	mismatches []scriptMismatch
	rewritten  string // the script with every expected output replaced by the actual one
}

// runScript runs a script on a fresh broker. An error is a fault of the
// script (or of the broker's start), not a mismatch; with it, rewritten
// has the output up to the faulty command and the rest of the script as
// it was.
func runScript(src string) (scriptResult, error) {
	lines, blocks, err := parseScript(src)
	if err != nil {
		return scriptResult{}, err
	}
	s, err := newScriptEnv()
	if err != nil {
		return scriptResult{}, err
	}
	defer s.close()
	var res scriptResult
	var outs []string
	for _, b := range blocks {
		got, err := s.exec(b.cmd)
		if err != nil {
			res.rewritten = rewriteScript(lines, blocks, outs)
			return res, fmt.Errorf("%d: %s: %v", b.line, b.cmd, err)
		}
		if got != b.want {
			res.mismatches = append(res.mismatches, scriptMismatch{b.line, b.cmd, b.want, got})
		}
		outs = append(outs, got)
	}
	res.rewritten = rewriteScript(lines, blocks, outs)
	return res, nil
}

// rewriteScript returns the script with the expected output of the first
// len(outs) blocks replaced by outs; the rest is kept as it was.
func rewriteScript(lines []string, blocks []scriptBlock, outs []string) string {
	var out []string
	prev := 0
	for i, got := range outs {
		b := blocks[i]
		out = append(out, lines[prev:b.outStart]...)
		if got != "" {
			out = append(out, strings.Split(got, "\n")...)
		}
		prev = b.outEnd
	}
	out = append(out, lines[prev:]...)
	return strings.Join(out, "\n") + "\n"
}

// scriptEnv is the broker a script drives and what the script named.
type scriptEnv struct {
	clk    *clock.Fake
	st     store.Store
	b      *Broker
	paused bool // "advance … lazy", "pause": no automatic Tick until resume or advance
	// showEnqueued: the command being run prints enqueued times.
	showEnqueued bool
	// tokens are the lock tokens received, by tokenKey, oldest first.
	tokens map[string][]uuid.UUID
	// recvs are the session receivers by name; closed says which were
	// closed (a closed one stays, to show what using it gets).
	recvs  map[string]*Receiver
	closed map[string]bool
}

func newScriptEnv() (*scriptEnv, error) {
	s := &scriptEnv{clk: clock.NewFake(t0), st: memstore.New(), tokens: map[string][]uuid.UUID{},
		recvs: map[string]*Receiver{}, closed: map[string]bool{}}
	b, err := Open(Options{Store: s.st, Clock: s.clk})
	if err != nil {
		return nil, err
	}
	s.b = b
	return s, nil
}

func (s *scriptEnv) close() {
	for _, r := range s.recvs {
		r.Close()
	}
	s.b.Close()
	s.st.Close()
}

// tickDue calls Tick while something is due, as Run would.
func (s *scriptEnv) tickDue() {
	for range 10000 {
		d := s.b.NextDeadline()
		if d.IsZero() || d.After(s.clk.Now()) {
			return
		}
		s.b.Tick()
	}
}

type scriptCmd func(s *scriptEnv, a *scriptArgs) (string, error)

var scriptCmds map[string]scriptCmd

func init() {
	scriptCmds = map[string]scriptCmd{
		"create-queue": (*scriptEnv).createQueue,
		"update-queue": (*scriptEnv).updateQueue,
		"delete-queue": func(s *scriptEnv, a *scriptArgs) (string, error) {
			return okOrErr(s.b.DeleteQueue(a.pos(0))), nil
		},
		"create-topic": (*scriptEnv).createTopic,
		"update-topic": (*scriptEnv).updateTopic,
		"delete-topic": func(s *scriptEnv, a *scriptArgs) (string, error) {
			return okOrErr(s.b.DeleteTopic(a.pos(0))), nil
		},
		"create-sub": (*scriptEnv).createSub,
		"update-sub": (*scriptEnv).updateSub,
		"delete-sub": func(s *scriptEnv, a *scriptArgs) (string, error) {
			return okOrErr(s.b.DeleteSubscription(a.pos(0), a.pos(1))), nil
		},
		"add-rule":         (*scriptEnv).addRule,
		"delete-rule":      (*scriptEnv).deleteRule,
		"rules":            (*scriptEnv).rules,
		"send":             (*scriptEnv).send,
		"schedule":         (*scriptEnv).send,
		"cancel":           (*scriptEnv).cancel,
		"receive":          (*scriptEnv).receive,
		"receive-deferred": (*scriptEnv).receiveDeferred,
		"peek":             (*scriptEnv).peek,
		"complete":         (*scriptEnv).settle,
		"abandon":          (*scriptEnv).settle,
		"release":          (*scriptEnv).settle,
		"defer":            (*scriptEnv).settle,
		"dead-letter":      (*scriptEnv).settle,
		"renew":            (*scriptEnv).renew,
		"state":            (*scriptEnv).state,
		"accept-session":   (*scriptEnv).accept,
		"accept-next":      (*scriptEnv).accept,
		"close":            (*scriptEnv).closeRecv,
		"renew-session":    (*scriptEnv).renewSession,
		"set-state":        (*scriptEnv).setState,
		"get-state":        (*scriptEnv).getState,
		"sessions":         (*scriptEnv).sessions,
		"peek-session":     (*scriptEnv).peekSession,
		"advance":          (*scriptEnv).advance,
		"tick": func(s *scriptEnv, a *scriptArgs) (string, error) {
			s.b.Tick()
			return "ok", nil
		},
		"resume": func(s *scriptEnv, a *scriptArgs) (string, error) {
			s.paused = false
			return "ok", nil
		},
		"pause": func(s *scriptEnv, a *scriptArgs) (string, error) {
			s.paused = true
			return "ok", nil
		},
		"deadline": func(s *scriptEnv, a *scriptArgs) (string, error) {
			if d := s.b.NextDeadline(); !d.IsZero() {
				return "deadline=" + s.rel(d), nil
			}
			return "deadline=none", nil
		},
		"restart": (*scriptEnv).restart,
	}
}

// exec runs one command line and returns its output.
func (s *scriptEnv) exec(line string) (string, error) {
	a, err := parseScriptArgs(line)
	if err != nil {
		return "", err
	}
	f := scriptCmds[a.name]
	if f == nil {
		return "", fmt.Errorf("unknown command %q", a.name)
	}
	s.showEnqueued = a.flag("enqueued")
	out, err := f(s, a)
	if err == nil {
		err = a.err
	}
	if err == nil {
		err = a.unused()
	}
	if err != nil {
		return "", err
	}
	if !s.paused {
		s.tickDue()
	}
	return out, nil
}

// scriptArgs are a command's arguments. Accessors record what was used,
// so that a misspelt argument fails the script instead of being ignored;
// the first bad value is kept in err.
type scriptArgs struct {
	name  string
	words []string
	kv    map[string]string
	used  map[string]bool
	err   error
}

func parseScriptArgs(line string) (*scriptArgs, error) {
	var toks []string
	var cur strings.Builder
	inQ, have := false, false
	for _, r := range line {
		switch {
		case r == '"':
			inQ, have = !inQ, true
		case !inQ && (r == ' ' || r == '\t'):
			if have {
				toks = append(toks, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if inQ {
		return nil, errors.New("unterminated quote")
	}
	if have {
		toks = append(toks, cur.String())
	}
	if len(toks) == 0 || toks[0] == "" {
		return nil, errors.New("no command name")
	}
	a := &scriptArgs{name: toks[0], kv: map[string]string{}, used: map[string]bool{}}
	for _, tok := range toks[1:] {
		if k, v, ok := strings.Cut(tok, "="); ok && k != "" && !strings.ContainsAny(k, " '") {
			if _, dup := a.kv[k]; dup {
				return nil, fmt.Errorf("argument %s given twice", k)
			}
			a.kv[k] = v
		} else {
			a.words = append(a.words, tok)
		}
	}
	return a, nil
}

func (a *scriptArgs) fail(format string, args ...any) {
	if a.err == nil {
		a.err = fmt.Errorf(format, args...)
	}
}

// pos returns the i-th positional word.
func (a *scriptArgs) pos(i int) string {
	a.used[fmt.Sprint("#", i)] = true
	if i >= len(a.words) {
		a.fail("%s: positional argument %d missing", a.name, i+1)
		return ""
	}
	return a.words[i]
}

// rest returns the positional words from i on that are not flags.
func (a *scriptArgs) rest(i int, flags ...string) []string {
	var out []string
	for j := i; j < len(a.words); j++ {
		a.used[fmt.Sprint("#", j)] = true
		if !slices.Contains(flags, a.words[j]) {
			out = append(out, a.words[j])
		}
	}
	return out
}

// flag reports whether word appears among the positional words (after
// the ones read by pos).
func (a *scriptArgs) flag(word string) bool {
	for j, w := range a.words {
		if w == word {
			a.used[fmt.Sprint("#", j)] = true
			return true
		}
	}
	return false
}

func (a *scriptArgs) str(k string) (string, bool) {
	v, ok := a.kv[k]
	a.used[k] = true
	return v, ok
}

func (a *scriptArgs) dur(k string) (time.Duration, bool) {
	v, ok := a.str(k)
	if !ok {
		return 0, false
	}
	if v == "inf" {
		return Infinite, true
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		a.fail("%s=%s: %v", k, v, err)
	}
	return d, true
}

func (a *scriptArgs) int(k string, def int64) int64 {
	v, ok := a.str(k)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		a.fail("%s=%s: %v", k, v, err)
	}
	return n
}

func (a *scriptArgs) seqs(k string) []int64 {
	v, ok := a.str(k)
	if !ok {
		a.fail("%s: %s= missing", a.name, k)
		return nil
	}
	var out []int64
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			a.fail("%s=%s: %v", k, v, err)
		}
		out = append(out, n)
	}
	return out
}

func (a *scriptArgs) props(k string) map[string]any {
	v, ok := a.str(k)
	if !ok {
		return nil
	}
	m := map[string]any{}
	for f := range strings.SplitSeq(v, ",") {
		key, val, ok := strings.Cut(f, ":")
		if !ok {
			a.fail("%s=%s: want k:v", k, v)
			continue
		}
		m[key] = scriptValue(val)
	}
	return m
}

func scriptValue(s string) any {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	if b, err := strconv.ParseBool(s); err == nil && (s == "true" || s == "false") {
		return b
	}
	return s
}

// unused reports an argument no accessor looked at.
func (a *scriptArgs) unused() error {
	for k := range a.kv {
		if !a.used[k] {
			return fmt.Errorf("%s: unknown argument %s=", a.name, k)
		}
	}
	for j, w := range a.words {
		if !a.used[fmt.Sprint("#", j)] {
			return fmt.Errorf("%s: unexpected word %q", a.name, w)
		}
	}
	return nil
}

// path returns the PATH argument (word 0) with the sub-queue a dlq or tdlq
// word selects.
func (a *scriptArgs) path() string {
	p := a.pos(0)
	switch {
	case a.flag("dlq"):
		p += dlqSuffix
	case a.flag("tdlq"):
		p += tdlqSuffix
	}
	return p
}

func okOrErr(err error) string {
	if err != nil {
		return errText(err)
	}
	return "ok"
}

func errText(err error) string {
	return fmt.Sprintf("error: %v: %v", KindOf(err), err)
}

// rel formats t relative to now: +30s, -1s, +1h30m.
func (s *scriptEnv) rel(t time.Time) string {
	d := t.Sub(s.clk.Now())
	if d < 0 {
		return "-" + fmtDur(-d)
	}
	return "+" + fmtDur(d)
}

// fmtDur is d.String() without zero trailing units: 1m, 1h30m, 2.5s.
func fmtDur(d time.Duration) string {
	if d == Infinite {
		return "inf"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ---- entities

func (a *scriptArgs) queueOpts(p *QueueProperties) {
	if d, ok := a.dur("lock"); ok {
		p.LockDuration = d
	}
	p.MaxDeliveryCount = int32(a.int("max-delivery", int64(p.MaxDeliveryCount)))
	if d, ok := a.dur("ttl"); ok {
		p.DefaultMessageTimeToLive = d
	}
	if d, ok := a.dur("dup-window"); ok {
		p.DuplicateDetectionHistoryTimeWindow = d
	}
	if d, ok := a.dur("auto-delete"); ok {
		p.AutoDeleteOnIdle = d
	}
	if v, ok := a.str("status"); ok {
		p.Status = EntityStatus(v)
	}
	if v, ok := a.str("forward"); ok {
		p.ForwardTo = v
	}
	if v, ok := a.str("forward-dlq"); ok {
		p.ForwardDeadLetteredMessagesTo = v
	}
	p.MaxSizeInMegabytes = a.int("max-size-mb", p.MaxSizeInMegabytes)
	p.MaxMessageSizeInKilobytes = a.int("max-msg-kb", p.MaxMessageSizeInKilobytes)
	if a.flag("session") {
		p.RequiresSession = true
	}
	if a.flag("dup-detection") {
		p.RequiresDuplicateDetection = true
	}
	if a.flag("dlq-on-expiry") {
		p.DeadLetteringOnMessageExpiration = true
	}
}

func (s *scriptEnv) createQueue(a *scriptArgs) (string, error) {
	p := DefaultQueueProperties()
	a.queueOpts(&p)
	_, err := s.b.CreateQueue(a.pos(0), p)
	return okOrErr(err), nil
}

func (s *scriptEnv) updateQueue(a *scriptArgs) (string, error) {
	// An entity that cannot be read is updated from the defaults: the
	// update reports why it cannot be made.
	p := DefaultQueueProperties()
	if info, err := s.b.GetQueue(a.pos(0)); err == nil {
		p = info.Properties
	}
	a.queueOpts(&p)
	_, err := s.b.UpdateQueue(a.pos(0), p)
	return okOrErr(err), nil
}

func (a *scriptArgs) topicOpts(p *TopicProperties) {
	if d, ok := a.dur("ttl"); ok {
		p.DefaultMessageTimeToLive = d
	}
	if d, ok := a.dur("dup-window"); ok {
		p.DuplicateDetectionHistoryTimeWindow = d
	}
	if d, ok := a.dur("auto-delete"); ok {
		p.AutoDeleteOnIdle = d
	}
	if v, ok := a.str("status"); ok {
		p.Status = EntityStatus(v)
	}
	p.MaxSizeInMegabytes = a.int("max-size-mb", p.MaxSizeInMegabytes)
	if a.flag("dup-detection") {
		p.RequiresDuplicateDetection = true
	}
}

func (s *scriptEnv) createTopic(a *scriptArgs) (string, error) {
	p := DefaultTopicProperties()
	a.topicOpts(&p)
	_, err := s.b.CreateTopic(a.pos(0), p)
	return okOrErr(err), nil
}

func (s *scriptEnv) updateTopic(a *scriptArgs) (string, error) {
	p := DefaultTopicProperties()
	if info, err := s.b.GetTopic(a.pos(0)); err == nil {
		p = info.Properties
	}
	a.topicOpts(&p)
	_, err := s.b.UpdateTopic(a.pos(0), p)
	return okOrErr(err), nil
}

// subOpts applies QOPTS to a subscription through QueueProperties, the
// fields the two share.
func (a *scriptArgs) subOpts(p *SubscriptionProperties) {
	q := QueueProperties{
		LockDuration: p.LockDuration, MaxDeliveryCount: p.MaxDeliveryCount,
		DefaultMessageTimeToLive: p.DefaultMessageTimeToLive, AutoDeleteOnIdle: p.AutoDeleteOnIdle,
		Status: p.Status, ForwardTo: p.ForwardTo, ForwardDeadLetteredMessagesTo: p.ForwardDeadLetteredMessagesTo,
		RequiresSession: p.RequiresSession, DeadLetteringOnMessageExpiration: p.DeadLetteringOnMessageExpiration,
	}
	a.queueOpts(&q)
	p.LockDuration, p.MaxDeliveryCount = q.LockDuration, q.MaxDeliveryCount
	p.DefaultMessageTimeToLive, p.AutoDeleteOnIdle = q.DefaultMessageTimeToLive, q.AutoDeleteOnIdle
	p.Status, p.ForwardTo, p.ForwardDeadLetteredMessagesTo = q.Status, q.ForwardTo, q.ForwardDeadLetteredMessagesTo
	p.RequiresSession, p.DeadLetteringOnMessageExpiration = q.RequiresSession, q.DeadLetteringOnMessageExpiration
	if a.flag("no-filter-dlq") {
		p.DeadLetteringOnFilterEvaluationExceptions = false
	}
}

// ruleFilter reads a FILTER; ok is false if none is given.
func (a *scriptArgs) ruleFilter() (RuleFilter, bool) {
	if v, ok := a.str("sql"); ok {
		return SQLRuleFilter(v, a.props("sql-params")), true
	}
	if a.flag("true") {
		return TrueRuleFilter(), true
	}
	if a.flag("false") {
		return FalseRuleFilter(), true
	}
	var c CorrelationFilter
	any := false
	for k, f := range map[string]*string{
		"corr-id": &c.CorrelationID, "msg-id": &c.MessageID, "label": &c.Label, "to": &c.To,
		"reply-to": &c.ReplyTo, "session-id": &c.SessionID, "content-type": &c.ContentType,
	} {
		if v, ok := a.str(k); ok {
			*f, any = v, true
		}
	}
	if m := a.props("corr-props"); m != nil {
		c.Properties, any = m, true
	}
	if !any {
		return RuleFilter{}, false
	}
	return CorrelationRuleFilter(c), true
}

func (s *scriptEnv) createSub(a *scriptArgs) (string, error) {
	p := DefaultSubscriptionProperties()
	a.subOpts(&p)
	var def *RuleDescription
	if f, ok := a.ruleFilter(); ok {
		def = &RuleDescription{Name: "$Default", Filter: f}
	}
	_, err := s.b.CreateSubscription(a.pos(0), a.pos(1), p, def)
	return okOrErr(err), nil
}

func (s *scriptEnv) updateSub(a *scriptArgs) (string, error) {
	p := DefaultSubscriptionProperties()
	if info, err := s.b.GetSubscription(a.pos(0), a.pos(1)); err == nil {
		p = info.Properties
	}
	a.subOpts(&p)
	_, err := s.b.UpdateSubscription(a.pos(0), a.pos(1), p)
	return okOrErr(err), nil
}

func (s *scriptEnv) addRule(a *scriptArgs) (string, error) {
	r := RuleDescription{Name: a.pos(2)}
	f, ok := a.ruleFilter()
	if !ok {
		return "", errors.New("add-rule: no filter")
	}
	r.Filter = f
	if v, ok := a.str("action"); ok {
		r.Action = &SQLAction{Expression: v, Parameters: a.props("action-params")}
	}
	_, err := s.b.CreateRule(a.pos(0), a.pos(1), r)
	return okOrErr(err), nil
}

func (s *scriptEnv) deleteRule(a *scriptArgs) (string, error) {
	return okOrErr(s.b.DeleteRule(a.pos(0), a.pos(1), a.pos(2))), nil
}

func (s *scriptEnv) rules(a *scriptArgs) (string, error) {
	rs, err := s.b.ListRules(a.pos(0), a.pos(1), 0, 100)
	if err != nil {
		return errText(err), nil
	}
	var out []string
	for _, r := range rs {
		l := r.Name + ": " + r.Filter.Kind.String()
		switch r.Filter.Kind {
		case FilterSQL:
			l += " " + strconv.Quote(r.Filter.Expression)
		case FilterCorrelation:
			c := r.Filter.Correlation
			for _, f := range []struct{ k, v string }{
				{"corr-id", c.CorrelationID}, {"msg-id", c.MessageID}, {"label", c.Label}, {"to", c.To},
				{"reply-to", c.ReplyTo}, {"session-id", c.SessionID}, {"content-type", c.ContentType},
			} {
				if f.v != "" {
					l += " " + f.k + "=" + quoteIf(f.v)
				}
			}
			if len(c.Properties) > 0 {
				l += " corr-props=" + fmtProps(c.Properties)
			}
		}
		if r.Action != nil {
			l += " action=" + strconv.Quote(r.Action.Expression)
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		return "(none)", nil
	}
	return strings.Join(out, "\n"), nil
}

// ---- messages

func (s *scriptEnv) send(a *scriptArgs) (string, error) {
	path := a.pos(0)
	bodies := a.rest(1)
	if v, ok := a.str("body"); ok {
		bodies = append([]string{v}, bodies...)
	}
	if len(bodies) == 0 {
		return "", fmt.Errorf("%s: no message body", a.name)
	}
	var at time.Time
	if v, ok := a.kv["at"]; ok && v == "none" {
		a.used["at"] = true // the zero time
	} else if d, ok := a.dur("at"); ok {
		at = s.clk.Now().Add(d)
	} else if a.name == "schedule" {
		return "", errors.New("schedule: at= missing")
	}
	var msgs []*message.Message
	for _, b := range bodies {
		m := &message.Message{Body: []byte(b)}
		if d, ok := a.dur("ttl"); ok {
			m.TTL = d
		}
		if v, ok := a.str("session"); ok {
			m.SessionID, m.EmptySessionID = v, v == ""
		}
		if v, ok := a.str("id"); ok {
			m.MessageID = v
		}
		if v, ok := a.str("corr"); ok {
			m.CorrelationID = v
		}
		m.Subject, _ = a.str("label")
		m.To, _ = a.str("to")
		m.ReplyTo, _ = a.str("reply-to")
		m.ApplicationProperties = a.props("props")
		m.Annotations = a.props("ann")
		if !at.IsZero() && a.name == "send" {
			if m.Annotations == nil {
				m.Annotations = map[string]any{}
			}
			m.Annotations[ScheduledEnqueueTimeAnnotation] = at
		}
		msgs = append(msgs, m)
	}
	if a.name == "send" {
		return okOrErr(s.b.Send(context.Background(), path, msgs)), nil
	}
	seqs, err := s.b.Schedule(context.Background(), path, msgs, at)
	if err != nil {
		return errText(err), nil
	}
	return "seq=" + joinSeqs(seqs), nil
}

func joinSeqs(seqs []int64) string {
	var f []string
	for _, n := range seqs {
		f = append(f, strconv.FormatInt(n, 10))
	}
	return strings.Join(f, ",")
}

func (s *scriptEnv) cancel(a *scriptArgs) (string, error) {
	return okOrErr(s.b.CancelScheduled(context.Background(), a.pos(0), a.seqs("seq"))), nil
}

// tokenKey names the lock tokens of seq received from path.
func tokenKey(path string, seq int64) string {
	if p, err := ParsePath(path); err == nil {
		path = p.String()
	}
	return fmt.Sprintf("%s#%d", strings.ToLower(path), seq)
}

func (s *scriptEnv) record(path string, ds []*Delivery, mode ReceiveMode) {
	if mode != PeekLock {
		return
	}
	for _, d := range ds {
		k := tokenKey(path, d.SequenceNumber)
		s.tokens[k] = append(s.tokens[k], d.LockToken)
	}
}

func (s *scriptEnv) deliveries(ds []*Delivery) string {
	if len(ds) == 0 {
		return "(none)"
	}
	var out []string
	for _, d := range ds {
		out = append(out, s.fmtDelivery(d))
	}
	return strings.Join(out, "\n")
}

func (s *scriptEnv) fmtDelivery(d *Delivery) string {
	m := d.Message
	var b strings.Builder
	fmt.Fprintf(&b, "seq=%d body=%s dc=%d", d.SequenceNumber, quoteIf(string(m.Body)), d.DeliveryCount)
	if !d.LockedUntil.IsZero() {
		b.WriteString(" lock=" + s.rel(d.LockedUntil))
	}
	if m.HasSessionID() {
		b.WriteString(" session=" + quoteIf(m.SessionID))
	}
	if d.State != StateActive {
		b.WriteString(" state=" + strings.ToLower(d.State.String()))
	}
	if !d.ScheduledEnqueueTime.IsZero() {
		b.WriteString(" scheduled=" + s.rel(d.ScheduledEnqueueTime))
	}
	if s.showEnqueued {
		b.WriteString(" enqueued=" + s.rel(d.EnqueuedTime))
	}
	if !d.ExpiresAt.IsZero() {
		b.WriteString(" expires=" + s.rel(d.ExpiresAt) + " ttl=" + fmtDur(d.TimeToLive))
	}
	if m.MessageID != nil {
		fmt.Fprintf(&b, " id=%s", quoteIf(fmt.Sprint(m.MessageID)))
	}
	if m.Subject != "" {
		b.WriteString(" label=" + quoteIf(m.Subject))
	}
	if m.CorrelationID != nil {
		fmt.Fprintf(&b, " corr=%s", quoteIf(fmt.Sprint(m.CorrelationID)))
	}
	props := map[string]any{}
	for k, v := range m.ApplicationProperties {
		if k != PropDeadLetterReason && k != PropDeadLetterErrorDescription {
			props[k] = v
		}
	}
	if len(props) > 0 {
		b.WriteString(" props=" + fmtProps(props))
	}
	if v, ok := m.ApplicationProperties[PropDeadLetterReason]; ok {
		b.WriteString(" reason=" + quoteIf(fmt.Sprint(v)))
	}
	if v, ok := m.ApplicationProperties[PropDeadLetterErrorDescription]; ok {
		b.WriteString(" desc=" + quoteIf(fmt.Sprint(v)))
	}
	if d.DeadLetterSource != "" {
		b.WriteString(" source=" + quoteIf(d.DeadLetterSource))
	}
	return b.String()
}

func fmtProps(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var f []string
	for _, k := range keys {
		f = append(f, k+":"+fmt.Sprint(m[k]))
	}
	return quoteIf(strings.Join(f, ","))
}

// quoteIf quotes s if it is empty or has spaces or quotes in it.
func quoteIf(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\"") {
		return strconv.Quote(s)
	}
	return s
}

func mode(a *scriptArgs) ReceiveMode {
	if a.flag("delete") {
		return ReceiveAndDelete
	}
	return PeekLock
}

func (s *scriptEnv) receive(a *scriptArgs) (string, error) {
	n := int(a.int("n", 1))
	if r := s.recvs[a.words0()]; r != nil {
		a.pos(0)
		ds, err := r.TryReceive(n)
		if err != nil {
			return errText(err), nil
		}
		s.record(r.Path(), ds, r.Mode())
		return s.deliveries(ds), nil
	}
	path, m := a.path(), mode(a)
	r, err := s.b.OpenReceiver(path, m)
	if err != nil {
		return errText(err), nil
	}
	defer r.Close()
	ds, err := r.TryReceive(n)
	if err != nil {
		return errText(err), nil
	}
	s.record(path, ds, m)
	return s.deliveries(ds), nil
}

func (a *scriptArgs) words0() string {
	if len(a.words) == 0 {
		return ""
	}
	return a.words[0]
}

func (s *scriptEnv) receiveDeferred(a *scriptArgs) (string, error) {
	seqs, m := a.seqs("seq"), mode(a)
	var ds []*Delivery
	var err error
	var path string
	if r := s.recvs[a.words0()]; r != nil {
		a.pos(0)
		path = r.Path()
		ds, err = r.ReceiveDeferred(context.Background(), seqs, m)
	} else if id, ok := a.str("session"); ok {
		path = a.path()
		ds, err = s.b.ReceiveDeferredInSession(context.Background(), path, id, seqs, m)
	} else {
		path = a.path()
		ds, err = s.b.ReceiveDeferred(context.Background(), path, seqs, m)
	}
	if err != nil {
		return errText(err), nil
	}
	s.record(path, ds, m)
	return s.deliveries(ds), nil
}

func (s *scriptEnv) peek(a *scriptArgs) (string, error) {
	ds, err := s.b.Peek(context.Background(), a.path(), a.int("from", 0), int(a.int("n", 10)))
	if err != nil {
		return errText(err), nil
	}
	return s.deliveries(ds), nil
}

// token returns the lock token for seq: the latest received, or the k-th.
func (s *scriptEnv) token(a *scriptArgs, path string, seq int64) (uuid.UUID, error) {
	toks := s.tokens[tokenKey(path, seq)]
	if len(toks) == 0 {
		return uuid.UUID{}, fmt.Errorf("no lock token received for seq %d from %s", seq, path)
	}
	k := a.int("token", int64(len(toks)))
	if k < 1 || k > int64(len(toks)) {
		return uuid.UUID{}, fmt.Errorf("token=%d: seq %d has %d tokens", k, seq, len(toks))
	}
	return toks[k-1], nil
}

func (s *scriptEnv) settle(a *scriptArgs) (string, error) {
	path := a.path()
	seqs := a.seqs("seq")
	props := a.props("props")
	reason, _ := a.str("reason")
	desc, _ := a.str("desc")
	if a.name != "dead-letter" && (reason != "" || desc != "") {
		return "", fmt.Errorf("%s takes no reason or desc", a.name)
	}
	var out []string
	for _, seq := range seqs {
		tok, err := s.token(a, path, seq)
		if err != nil {
			return "", err
		}
		ctx := context.Background()
		switch a.name {
		case "complete":
			err = s.b.Complete(ctx, path, tok)
		case "abandon":
			err = s.b.Abandon(ctx, path, tok, props)
		case "release":
			err = s.b.Release(ctx, path, tok)
		case "defer":
			err = s.b.Defer(ctx, path, tok, props)
		case "dead-letter":
			err = s.b.DeadLetter(ctx, path, tok, reason, desc, props)
		}
		if len(seqs) > 1 {
			out = append(out, fmt.Sprintf("seq=%d %s", seq, okOrErr(err)))
		} else {
			out = append(out, okOrErr(err))
		}
	}
	return strings.Join(out, "\n"), nil
}

func (s *scriptEnv) renew(a *scriptArgs) (string, error) {
	path := a.path()
	seqs := a.seqs("seq")
	var toks []uuid.UUID
	for _, seq := range seqs {
		tok, err := s.token(a, path, seq)
		if err != nil {
			return "", err
		}
		toks = append(toks, tok)
	}
	until, err := s.b.RenewLock(context.Background(), path, toks)
	if err != nil {
		return errText(err), nil
	}
	var out []string
	for _, u := range until {
		out = append(out, "lock="+s.rel(u))
	}
	return strings.Join(out, "\n"), nil
}

func (s *scriptEnv) state(a *scriptArgs) (string, error) {
	path := a.pos(0)
	typ, p, err := s.b.Resolve(path)
	if err != nil {
		return errText(err), nil
	}
	var c Counts
	switch typ {
	case EntityTopic:
		info, err := s.b.GetTopic(p.Entity)
		if err != nil {
			return errText(err), nil
		}
		return fmt.Sprintf("scheduled=%d subs=%d", info.Counts.Scheduled, info.SubscriptionCount), nil
	case EntitySubscription:
		info, err := s.b.GetSubscription(p.Entity, p.Subscription)
		if err != nil {
			return errText(err), nil
		}
		c = info.Counts
	default:
		info, err := s.b.GetQueue(p.Entity)
		if err != nil {
			return errText(err), nil
		}
		c = info.Counts
	}
	var f []string
	for _, x := range []struct {
		k string
		n int64
	}{{"active", c.Active}, {"deferred", c.Deferred}, {"scheduled", c.Scheduled}, {"dlq", c.DeadLetter}, {"transfer", c.Transfer}, {"tdlq", c.TransferDeadLetter}} {
		if x.n != 0 {
			f = append(f, fmt.Sprintf("%s=%d", x.k, x.n))
		}
	}
	if c.Total != c.Active+c.Deferred+c.Scheduled+c.DeadLetter+c.Transfer+c.TransferDeadLetter {
		f = append(f, fmt.Sprintf("total=%d", c.Total))
	}
	if c.Total == 0 && c.SizeInBytes != 0 {
		f = append(f, fmt.Sprintf("bytes=%d", c.SizeInBytes))
	}
	if len(f) == 0 {
		return "empty", nil
	}
	return strings.Join(f, " "), nil
}

// ---- sessions

// tryOnce is a context that is live for its first Err check and done
// after: AcceptNextSession with it looks for a session once and returns
// instead of waiting.
type tryOnce struct {
	context.Context
	checked bool
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (c *tryOnce) Done() <-chan struct{} { return closedCh }
func (c *tryOnce) Err() error {
	if !c.checked {
		c.checked = true
		return nil
	}
	return context.Canceled
}

func (s *scriptEnv) accept(a *scriptArgs) (string, error) {
	path, m := a.pos(0), mode(a)
	name, named := a.str("as")
	var r *Receiver
	var err error
	if a.name == "accept-session" {
		r, err = s.b.AcceptSession(path, a.pos(1), m)
	} else {
		r, err = s.b.AcceptNextSession(&tryOnce{Context: context.Background()}, path, m)
		if errors.Is(err, context.Canceled) {
			return "no session available", nil
		}
	}
	if err != nil {
		return errText(err), nil
	}
	if !named {
		name = r.SessionID()
	}
	if old := s.recvs[name]; old != nil && !s.closed[name] {
		old.Close() // the name is taken over
	}
	s.recvs[name] = r
	delete(s.closed, name)
	return fmt.Sprintf("session=%s lock=%s", quoteIf(r.SessionID()), s.rel(r.SessionLockedUntil())), nil
}

// sessTarget reads a session's receiver by name, or else PATH ID: the
// session addressed through the broker.
func (s *scriptEnv) sessTarget(a *scriptArgs) (r *Receiver, path, id string) {
	if r := s.recvs[a.words0()]; r != nil {
		a.pos(0)
		return r, "", ""
	}
	return nil, a.pos(0), a.pos(1)
}

func (s *scriptEnv) closeRecv(a *scriptArgs) (string, error) {
	r := s.recvs[a.pos(0)]
	if r == nil {
		return "", fmt.Errorf("no session receiver named %q", a.pos(0))
	}
	s.closed[a.pos(0)] = true
	return okOrErr(r.Close()), nil
}

func (s *scriptEnv) renewSession(a *scriptArgs) (string, error) {
	var until time.Time
	var err error
	if r, path, id := s.sessTarget(a); r != nil {
		until, err = r.RenewSessionLock(context.Background())
	} else {
		until, err = s.b.RenewSessionLock(context.Background(), path, id)
	}
	if err != nil {
		return errText(err), nil
	}
	return "lock=" + s.rel(until), nil
}

func (s *scriptEnv) setState(a *scriptArgs) (string, error) {
	var state []byte
	if v, ok := a.str("value"); ok {
		state = []byte(v)
	}
	if r, path, id := s.sessTarget(a); r != nil {
		return okOrErr(r.SetSessionState(context.Background(), state)), nil
	} else {
		return okOrErr(s.b.SetSessionState(context.Background(), path, id, state)), nil
	}
}

func (s *scriptEnv) getState(a *scriptArgs) (string, error) {
	var st []byte
	var err error
	if r, path, id := s.sessTarget(a); r != nil {
		st, err = r.SessionState(context.Background())
	} else {
		st, err = s.b.GetSessionState(context.Background(), path, id)
	}
	if err != nil {
		return errText(err), nil
	}
	if st == nil {
		return "state=(none)", nil
	}
	return "state=" + quoteIf(string(st)), nil
}

func (s *scriptEnv) sessions(a *scriptArgs) (string, error) {
	var after time.Time
	if d, ok := a.dur("after"); ok {
		after = s.clk.Now().Add(d)
	}
	ids, err := s.b.ListSessions(context.Background(), a.pos(0), after, int(a.int("skip", 0)), int(a.int("top", 0)))
	if err != nil {
		return errText(err), nil
	}
	if len(ids) == 0 {
		return "(none)", nil
	}
	for i, id := range ids {
		ids[i] = quoteIf(id)
	}
	return strings.Join(ids, " "), nil
}

func (s *scriptEnv) peekSession(a *scriptArgs) (string, error) {
	ds, err := s.b.PeekSession(context.Background(), a.pos(0), a.pos(1), a.int("from", 0), int(a.int("n", 10)))
	if err != nil {
		return errText(err), nil
	}
	return s.deliveries(ds), nil
}

// ---- time and life

func (s *scriptEnv) advance(a *scriptArgs) (string, error) {
	d, err := time.ParseDuration(a.pos(0))
	if err != nil {
		return "", err
	}
	end := s.clk.Now().Add(d)
	if a.flag("lazy") {
		s.clk.Set(end)
		s.paused = true
		return "ok", nil
	}
	s.paused = false
	for range 100000 {
		next := s.b.NextDeadline()
		if next.IsZero() || next.After(end) {
			break
		}
		if next.After(s.clk.Now()) {
			s.clk.Set(next)
		}
		s.b.Tick()
	}
	s.clk.Set(end)
	return "ok", nil
}

func (s *scriptEnv) restart(a *scriptArgs) (string, error) {
	for _, r := range s.recvs {
		r.Close()
	}
	clear(s.recvs)
	clear(s.closed)
	if err := s.b.Close(); err != nil {
		return "", err
	}
	b, err := Open(Options{Store: s.st, Clock: s.clk})
	if err != nil {
		return "", err
	}
	s.b = b
	return "ok", nil
}
