package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
)

// Pinning (the sensitivity variant of docs/benchmarks.md): with -pin the
// harness re-executes itself under `taskset -c 0` (the load generator and
// its Go runtime then see one CPU) and starts every broker process under
// `taskset -c 1`, so that broker and clients no longer share a core.

// pinnedEnv marks the re-executed, pinned harness.
const pinnedEnv = "BUSBAR_BENCH_PINNED"

// brokerCPUs is the CPU list brokers run on ("" when not pinned).
var brokerCPUs string

// brokerCommand returns the command that starts a broker process: bin
// itself, or under taskset when pinning (taskset execs bin, so the PID
// is the broker's).
func brokerCommand(bin string, args ...string) *exec.Cmd {
	if brokerCPUs == "" {
		return exec.Command(bin, args...)
	}
	return exec.Command("taskset", append([]string{"-c", brokerCPUs, bin}, args...)...)
}

// startBroker starts bin with args (pinned as brokerCommand does) in a
// process group of its own, its output appended to logPath. exited is
// closed when the process has been waited for.
func startBroker(bin, logPath string, args ...string) (cmd *exec.Cmd, logf *os.File, exited chan struct{}, err error) {
	logf, err = os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, nil, err
	}
	cmd = brokerCommand(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, nil, nil, err
	}
	exited = make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	return cmd, logf, exited, nil
}

// reexecPinned runs this program again with args under taskset -c
// clientCPUs, forwarding SIGINT and SIGTERM, and returns its exit code.
func reexecPinned(args []string, clientCPUs, brokerCPU string, stdout, stderr io.Writer) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		fmt.Fprintln(stderr, "-pin needs taskset (util-linux):", err)
		return 1
	}
	cmd := exec.Command("taskset", append([]string{"-c", clientCPUs, self}, args...)...)
	cmd.Env = append(os.Environ(), pinnedEnv+"="+brokerCPU)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sig:
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// cpusAllowed returns this process's Cpus_allowed_list.
func cpusAllowed(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Cpus_allowed_list:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "Cpus_allowed_list:"))
		}
	}
	return "?"
}
