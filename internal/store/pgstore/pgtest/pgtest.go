// Package pgtest runs a throw-away PostgreSQL server for tests: initdb in a
// temporary directory, a free loopback port, the unix socket in the same
// directory, stopped by signalling the postmaster's PID (pgtest_unix.go;
// elsewhere with pg_ctl stop). It needs Debian's PostgreSQL
// binaries (package postgresql; /usr/lib/postgresql/*/bin); when they are
// missing Start returns ErrNoPostgres and the tests skip, saying so.
// Database is the usual start of a test: a server and a new database.
//
// initdb and postgres refuse to run as root: when the tests run as root,
// the server runs as the unprivileged user "postgres" (created by the
// Debian package; created here with useradd when missing), which is
// handed the temporary directory.
//
// Restart restarts the server with pg_ctl (fast, or immediate: a crash)
// on the same port and data. Proxy (proxy.go) is a TCP proxy on a
// loopback port that a test puts between one client (a cluster node) and
// the server, and switches between passing, black-holing (sockets stay
// open, nothing moves: a partition) and resetting connections:
//
//	client ──► Proxy (127.0.0.1:0) ──► PostgreSQL
//	           per connection: accept ─► [wait while black-hole] ─► dial
//	           upstream ─► two pumps (read ─► [hold while black-hole] ─► write)
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoPostgres means no PostgreSQL server binaries were found.
var ErrNoPostgres = errors.New("pgtest: no PostgreSQL binaries (initdb, pg_ctl) found: install the Debian package postgresql")

// Server is one running PostgreSQL instance.
type Server struct {
	Dir  string // the temporary directory: data/ and the unix socket
	Port int
	bin  string
	uid  int // the user the server runs as; -1 for the current user
	gid  int
	dbs  atomic.Int64

	dbOnce sync.Once
	dbErr  error
}

// findBin returns the directory holding initdb and pg_ctl.
func findBin() (string, error) {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(matches)))
	for _, d := range matches {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", ErrNoPostgres
}

// Start initialises and starts a server. Stop it with Stop.
func Start() (*Server, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "busbar-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, bin: bin, uid: -1, gid: -1}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			// Debian's package creates it; binaries installed otherwise
			// may come without.
			if out, uerr := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "postgres").CombinedOutput(); uerr != nil {
				os.RemoveAll(dir)
				return nil, fmt.Errorf("pgtest: running as root needs an unprivileged user postgres, and useradd failed: %v: %s", uerr, out)
			}
			if u, err = user.Lookup("postgres"); err != nil {
				os.RemoveAll(dir)
				return nil, fmt.Errorf("pgtest: user postgres: %w", err)
			}
		}
		s.uid, _ = strconv.Atoi(u.Uid)
		s.gid, _ = strconv.Atoi(u.Gid)
		if err := os.Chown(dir, s.uid, s.gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if out, err := s.run("initdb", "-D", s.data(), "-U", "busbar", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.Port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	if err := s.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) data() string { return filepath.Join(s.Dir, "data") }

// run runs a PostgreSQL program as the server's user.
func (s *Server) run(prog string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(s.bin, prog), args...)
	cmd.Dir = s.Dir
	if s.uid >= 0 {
		runAs(cmd, s.uid, s.gid)
	}
	return cmd.CombinedOutput()
}

// Start starts the (stopped) server again on the same port and data.
func (s *Server) Start() error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on -c shared_buffers=32MB -c max_connections=100", s.Port, s.Dir)
	if out, err := s.run("pg_ctl", "-D", s.data(), "-o", opts, "-l", filepath.Join(s.Dir, "log"), "-w", "-t", "30", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.Dir, "log"))
		return fmt.Errorf("pgtest: pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	return nil
}

// RestartMode is how Restart stops the server: pg_ctl's shutdown modes.
type RestartMode string

const (
	// Fast: clients are disconnected, open transactions rolled back, a
	// checkpoint is written; the next start needs no recovery.
	Fast RestartMode = "fast"
	// Immediate: every process exits at once, as in a crash; the next
	// start replays the WAL (crash recovery).
	Immediate RestartMode = "immediate"
)

// Restart stops the server in mode and starts it again (pg_ctl restart,
// as the server's user), on the same port with the same data, and
// returns once it accepts connections.
func (s *Server) Restart(mode RestartMode) error {
	if mode != Fast && mode != Immediate {
		return fmt.Errorf("pgtest: restart mode %q: want fast or immediate", mode)
	}
	// pg_ctl restart reuses the options of the last start (postmaster.opts:
	// the port among them); -l keeps the server's output out of our pipe.
	if out, err := s.run("pg_ctl", "-D", s.data(), "-m", string(mode), "-l", filepath.Join(s.Dir, "log"), "-w", "-t", "60", "restart"); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.Dir, "log"))
		return fmt.Errorf("pgtest: pg_ctl restart -m %s: %v\n%s\n%s", mode, err, out, log)
	}
	return nil
}

// PID is the postmaster's process id, 0 when it is not running.
func (s *Server) PID() int {
	b, err := os.ReadFile(filepath.Join(s.data(), "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// Crash stops the server the way a crash does: every backend exits at
// once, no checkpoint, the next start runs crash recovery. It waits until
// the server is gone.
func (s *Server) Crash() error { return s.stop(Immediate) }

// Stop stops the server (fast shutdown) and waits until it is gone; the
// data stay for Start.
func (s *Server) Stop() error { return s.stop(Fast) }

// Close stops the server and removes its directory.
func (s *Server) Close() error {
	err := s.Stop()
	os.RemoveAll(s.Dir)
	return err
}

// URL is the connection URL of database db over TCP.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://busbar@127.0.0.1:%d/%s?sslmode=disable", s.Port, db)
}

// NewDatabase returns the URL of a new, empty namespace: a schema of its
// own in the database busbar (creating a schema is much cheaper than
// creating a database), named in the URL's search_path.
func (s *Server) NewDatabase() (string, error) {
	name := fmt.Sprintf("t_%d_%d", os.Getpid(), s.dbs.Add(1))
	if err := Exec(s.URL("postgres"), "SELECT 1"); err != nil {
		return "", err
	}
	s.dbOnce.Do(func() { s.dbErr = Exec(s.URL("postgres"), "CREATE DATABASE busbar") })
	if s.dbErr != nil {
		return "", s.dbErr
	}
	if err := Exec(s.URL("busbar"), "CREATE SCHEMA "+name); err != nil {
		return "", err
	}
	return s.URL("busbar") + "&search_path=" + name, nil
}

// Exec runs sql on database url (for tests that reach behind the store).
func Exec(url, sql string, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// QueryInt runs sql, which returns one integer, on database url.
func QueryInt(url, sql string, args ...any) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}

// Database starts a server for test t (skipping t when the PostgreSQL
// binaries are missing), stops it when t ends, and returns it with the
// URL of a new database on it.
func Database(t testing.TB) (*Server, string) {
	t.Helper()
	pg, err := Start()
	if errors.Is(err, ErrNoPostgres) {
		t.Skipf("skipped: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })
	url, err := pg.NewDatabase()
	if err != nil {
		t.Fatal(err)
	}
	return pg, url
}
