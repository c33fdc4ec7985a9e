package bench

import (
	"bytes"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer the progress loop and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits (generously) until the buffer matches re.
func waitFor(t *testing.T, buf *syncBuffer, re *regexp.Regexp) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !re.MatchString(buf.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("no match for %q in %q", re, buf.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestProgress checks the live display: the status line of the running
// phase (its round, count, total and rate), appended as lines in a log
// and rewritten in place on a terminal, finished lines above it, nothing
// when quiet, and a cleared line at the end on a terminal.
func TestProgress(t *testing.T) {
	t.Run("log", func(t *testing.T) {
		var buf syncBuffer
		p := startProgress(&buf, false, false, 10*time.Millisecond)
		time.Sleep(30 * time.Millisecond) // no phase yet: no line
		if s := buf.String(); s != "" {
			t.Fatalf("before any phase: %q", s)
		}
		p.setRound(2, 3)
		p.set("W1 Busbar 4 conn × window 64", 1000)
		p.add(40)
		p.add(2)
		waitFor(t, &buf, regexp.MustCompile(`(?m)^  … round 2/3 W1 Busbar 4 conn × window 64: 42/1000 msgs, [0-9.]+k? msg/s, [0-9]+ s, load -?[0-9.]+\n`))
		p.log("W1 done %d", 7)
		p.set("W2 Busbar", 0) // unknown total: no "/N"
		p.add(5)
		waitFor(t, &buf, regexp.MustCompile(`(?m)^  … round 2/3 W2 Busbar: 5 msgs, `))
		p.close()
		out := buf.String()
		if !strings.Contains(out, "\nW1 done 7\n") && !strings.HasPrefix(out, "W1 done 7\n") {
			t.Errorf("finished line missing: %q", out)
		}
		if strings.Contains(out, "\r") || strings.Contains(out, "\033") {
			t.Errorf("terminal control characters in a log: %q", out)
		}
	})
	t.Run("terminal", func(t *testing.T) {
		var buf syncBuffer
		p := startProgress(&buf, true, false, 10*time.Millisecond)
		p.set("W5 Busbar", 0)
		p.add(3)
		waitFor(t, &buf, regexp.MustCompile("\r\033\\[KW5 Busbar: 3 msgs, "))
		p.log("finished")
		if s := buf.String(); !strings.Contains(s, "\r\033[Kfinished\n") {
			t.Errorf("a finished line clears the status line first: %q", s)
		}
		p.close()
		if s := buf.String(); !strings.HasSuffix(s, "\r\033[K") {
			t.Errorf("close leaves the status line: %q", s)
		}
	})
	t.Run("quiet", func(t *testing.T) {
		var buf syncBuffer
		p := startProgress(&buf, true, true, time.Millisecond)
		p.set("W1", 10)
		p.add(1)
		time.Sleep(30 * time.Millisecond)
		p.close()
		if s := buf.String(); s != "" {
			t.Errorf("quiet progress printed %q", s)
		}
	})
}
