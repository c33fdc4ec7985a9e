//go:build !unix

package pgtest

import (
	"fmt"
	"os/exec"
	"path/filepath"
)

// runAs is not needed where the server is never started as root.
func runAs(*exec.Cmd, int, int) {}

// stop stops the server with pg_ctl stop in mode and waits until it is
// gone.
func (s *Server) stop(mode RestartMode) error {
	if s.PID() == 0 {
		return nil
	}
	if out, err := s.run("pg_ctl", "-D", s.data(), "-m", string(mode), "-w", "-t", "15", "stop"); err != nil {
		return fmt.Errorf("pgtest: pg_ctl stop -m %s in %s: %v\n%s", mode, filepath.Base(s.Dir), err, out)
	}
	return nil
}
