package bench

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clkTck is USER_HZ, the unit of utime/stime in /proc/<pid>/stat (100 on
// every Linux this runs on).
const clkTck = 100

// procCPU returns the user+system CPU time a process (and its reaped
// children) has used, from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, error) {
	u, s, err := procCPUSplit(pid)
	return u + s, err
}

// procCPUSplit returns a process's user and system CPU time.
func procCPUSplit(pid int) (user, sys time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	s := string(b)
	// The command name may contain spaces: fields start after the last ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("bad stat for %d", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("short stat for %d", pid)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut) * time.Second / clkTck, time.Duration(st) * time.Second / clkTck, nil
}

// procRSS returns the resident set size of a process in bytes (VmRSS).
func procRSS(pid int) int64 {
	return procStatusKB(pid, "VmRSS:") * 1024
}

// procHWM returns the peak resident set size of a process in bytes
// (VmHWM, since the process started).
func procHWM(pid int) int64 {
	return procStatusKB(pid, "VmHWM:") * 1024
}

func procStatusKB(pid int, key string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, key) {
			fs := strings.Fields(line[len(key):])
			if len(fs) > 0 {
				v, _ := strconv.ParseInt(fs[0], 10, 64)
				return v
			}
		}
	}
	return 0
}

// machineCPU returns the machine's CPU time so far from /proc/stat's cpu
// line, in USER_HZ ticks: all of it (user through steal) and steal, the
// time its virtual CPUs were ready to run and the hypervisor did not run
// them (for other tenants, and on some VMs for its own work on this
// machine's devices: docs/benchmarks.md, "The machine"). ok is false when it
// cannot be read.
func machineCPU() (all, steal int64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	// cpu user nice system idle iowait irq softirq steal [guest guest_nice]
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i := 1; i <= 8; i++ {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, 0, false
		}
		all += v
		if i == 8 {
			steal = v
		}
	}
	return all, steal, true
}

// loadAvg returns the 1-minute load average.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// diskUsage returns the bytes allocated on disk (st_blocks × 512) by all
// files under dir.
func diskUsage(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				total += st.Blocks * 512
			} else {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}

var ssPID = regexp.MustCompile(`pid=(\d+)`)

// pidListening returns the PID of the process listening on 127.0.0.1:port
// (via ss), or 0.
func pidListening(port int) int {
	out, err := exec.Command("ss", "-Hltnp", fmt.Sprintf("sport = :%d", port)).Output()
	if err != nil {
		return 0
	}
	m := ssPID.FindSubmatch(out)
	if m == nil {
		return 0
	}
	pid, _ := strconv.Atoi(string(m[1]))
	return pid
}

// waitPort waits until something accepts TCP connections on addr.
func waitPort(ctx context.Context, addr string) error {
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", addr, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// portFree reports whether nothing listens on 127.0.0.1:port.
func portFree(port int) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 100*time.Millisecond)
	if err == nil {
		c.Close()
		return false
	}
	return true
}

// alive reports whether pid exists (and is not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}
