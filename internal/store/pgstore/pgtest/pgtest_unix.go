//go:build unix

package pgtest

import (
	"fmt"
	"os/exec"
	"syscall"
	"time"
)

// runAs makes cmd run as the user uid, group gid.
func runAs(cmd *exec.Cmd, uid, gid int) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
}

// stop signals the postmaster as pg_ctl's mode would (SIGQUIT for
// immediate, SIGINT for fast) and waits until it is gone.
func (s *Server) stop(mode RestartMode) error {
	pid := s.PID()
	if pid == 0 {
		return nil
	}
	sig := syscall.SIGINT
	if mode == Immediate {
		sig = syscall.SIGQUIT
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return err
	}
	for range 300 {
		if syscall.Kill(pid, 0) != nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("pgtest: postmaster %d did not stop", pid)
}
