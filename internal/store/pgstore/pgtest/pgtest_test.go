package pgtest_test

import (
	"bufio"
	"errors"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/store/pgstore/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo serves lines back until closed; it returns its address and a stop
// function that waits for its goroutines.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	conns := make(chan net.Conn, 16)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// roundTrip writes a line and reads it back within d.
func roundTrip(c net.Conn, r *bufio.Reader, d time.Duration) error {
	c.SetDeadline(time.Now().Add(d))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return errors.New("echoed " + line)
	}
	return nil
}

// TestProxyModes: pass forwards, a black hole keeps sockets open and
// forwards nothing (what was held flows on after it heals), reset closes
// everything; Close stops every goroutine (goleak in TestMain).
func TestProxyModes(t *testing.T) {
	p, err := pgtest.NewProxy(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatalf("pass: %v", err)
	}

	p.SetMode(pgtest.BlackHole)
	if err := roundTrip(c, r, 200*time.Millisecond); err == nil {
		t.Fatal("a black hole forwarded")
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("black hole: %v, want a timeout (the socket stays open)", err)
	}
	// The line is held, and Holds sees it (and nothing it was not sent).
	if !p.Holds([]byte("ping\n")) || p.Holds([]byte("pong")) {
		t.Fatalf("Holds: ping %v, pong %v; want true, false", p.Holds([]byte("ping\n")), p.Holds([]byte("pong")))
	}
	// A new connection is accepted and stays open, and nothing moves.
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	r2 := bufio.NewReader(c2)
	if err := roundTrip(c2, r2, 200*time.Millisecond); err == nil {
		t.Fatal("a new connection passed the black hole")
	}
	// Healed: the held line arrives on each, then new ones pass.
	p.SetMode(pgtest.Pass)
	for i, cc := range []struct {
		c net.Conn
		r *bufio.Reader
	}{{c, r}, {c2, r2}} {
		cc.c.SetDeadline(time.Now().Add(5 * time.Second))
		if line, err := cc.r.ReadString('\n'); err != nil || line != "ping\n" {
			t.Fatalf("conn %d after healing: %q, %v", i, line, err)
		}
		if err := roundTrip(cc.c, cc.r, 5*time.Second); err != nil {
			t.Fatalf("conn %d after healing: %v", i, err)
		}
	}
	if p.Holds([]byte("ping")) {
		t.Fatal("a chunk is still held after healing")
	}

	p.SetMode(pgtest.Reset)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("reset left the connection open")
	}
	c3, err := net.Dial("tcp", p.Addr())
	if err == nil {
		c3.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c3.Read(make([]byte, 1)); err == nil {
			t.Fatal("a connection accepted during a reset stayed open")
		}
		c3.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Conns() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d sockets still open after a reset", p.Conns())
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.SetMode(pgtest.Pass)
	c4, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c4.Close()
	if err := roundTrip(c4, bufio.NewReader(c4), 5*time.Second); err != nil {
		t.Fatalf("pass after reset: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c4, bufio.NewReader(c4), time.Second); err == nil {
		t.Fatal("a connection outlived Close")
	}
}

// TestRestart: both modes keep the port and the data; the server accepts
// connections when Restart returns.
func TestRestart(t *testing.T) {
	s, err := pgtest.Start()
	if errors.Is(err, pgtest.ErrNoPostgres) {
		t.Skipf("skipped: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	url, err := s.NewDatabase()
	if err != nil {
		t.Fatal(err)
	}
	if err := pgtest.Exec(url, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	port := s.Port
	for i, mode := range []pgtest.RestartMode{pgtest.Fast, pgtest.Immediate} {
		pid := s.PID()
		if err := s.Restart(mode); err != nil {
			t.Fatal(err)
		}
		if s.PID() == pid || s.PID() == 0 {
			t.Fatalf("%s: postmaster %d before, %d after", mode, pid, s.PID())
		}
		if s.Port != port {
			t.Fatalf("%s: port moved", mode)
		}
		if err := pgtest.Exec(url, "INSERT INTO kept VALUES ($1)", i+2); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
	}
	if n, err := pgtest.QueryInt(url, "SELECT count(*) FROM kept"); err != nil || n != 3 {
		t.Fatalf("rows after two restarts: %d, %v", n, err)
	}
	if err := s.Restart("smart"); err == nil {
		t.Fatal("an unknown mode was accepted")
	}
}
