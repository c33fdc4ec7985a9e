package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/version"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func noEnv(string) (string, bool) { return "", false }

// syncBuffer collects a command's output while it runs.
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

func TestServeStartsAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	env := func(k string) (string, bool) {
		if k == "BUSBAR_LOG_FORMAT" {
			return "json", true
		}
		return "", false
	}
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"serve", "--memory", "--amqp", "127.0.0.1:0", "--http", "127.0.0.1:0"}, io.Discard, &out, env)
	}()
	httpAddr := regexp.MustCompile(`"http":"([^"]+)"`)
	deadline := time.Now().Add(10 * time.Second)
	var addr string
	for time.Now().Before(deadline) {
		if m := httpAddr.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if addr == "" {
		cancel()
		<-done
		t.Fatalf("no ready log line with the http address; output:\n%s", out.String())
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("health = %d", resp.StatusCode)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), `"version":"`+version.Version()+`","commit":"`+version.Commit()+`"`) {
		t.Errorf("the ready line does not carry the version:\n%s", out.String())
	}
	if !strings.Contains(out.String(), `"msg":"stopped"`) {
		t.Fatalf("no clean stop logged:\n%s", out.String())
	}
}

func TestServeUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  func(string) (string, bool)
		want string
	}{
		{"bad log level", []string{"serve", "--memory", "--log-level", "loud"}, noEnv, "log"},
		{"bad log format", []string{"serve", "--memory", "--log-format", "xml"}, noEnv, "log"},
		{"unknown flag", []string{"serve", "--nope"}, noEnv, "unknown flag"},
		{"bad env", []string{"serve"}, func(k string) (string, bool) {
			if k == "BUSBAR_MEMORY" {
				return "maybe", true
			}
			return "", false
		}, "BUSBAR_MEMORY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := run(context.Background(), tc.args, io.Discard, &stderr, tc.env)
			if code == 0 {
				t.Fatalf("exit code 0, want failure")
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("stderr %q does not mention %q", stderr.String(), tc.want)
			}
		})
	}
}

func TestServeBadConfigNamesPath(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/Config.json"
	if err := writeFile(path, `{"UserConfig":{"Namespaces":[{"Name":"sbemulatorns","Queues":[{"Name":"q","Properties":{"LockDuration":"PT10M"}}]}],"Logging":{"Type":"Console"}}}`); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "--memory", "--config", path, "--amqp", "127.0.0.1:0", "--http", "127.0.0.1:0"}, io.Discard, &stderr, noEnv)
	if code == 0 {
		t.Fatal("serve accepted an invalid Config.json")
	}
	if !strings.Contains(stderr.String(), "UserConfig.Namespaces[0].Queues[0].Properties.LockDuration") {
		t.Fatalf("error does not name the JSON path: %s", stderr.String())
	}
}

// TestServeBadNameInConfig: a Config.json entity whose name breaks the
// naming rule stops start-up with an error naming the entity.
func TestServeBadNameInConfig(t *testing.T) {
	path := t.TempDir() + "/Config.json"
	if err := writeFile(path, `{"UserConfig":{"Namespaces":[{"Name":"sbemulatorns","Queues":[{"Name":"a/../b"}]}],"Logging":{"Type":"Console"}}}`); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "--memory", "--config", path, "--amqp", "127.0.0.1:0", "--http", "127.0.0.1:0"}, io.Discard, &stderr, noEnv)
	if code == 0 {
		t.Fatal("serve accepted a queue named a/../b")
	}
	if want := `UserConfig.Namespaces[0].Queues[0].Name: The queue or topic name "a/../b" is not valid: it has the path segment ".."`; !strings.Contains(stderr.String(), want) {
		t.Fatalf("stderr %q does not contain %q", stderr.String(), want)
	}
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }

// TestServeConfigSearchAndHealth runs serve as the container image does:
// --config-search finds the emulator's Config.json at the second path, and
// `busbar health` (the image's health check) reports the broker healthy,
// then unreachable once it has stopped.
func TestServeConfigSearchAndHealth(t *testing.T) {
	dir := t.TempDir()
	found := dir + "/emulator/Config.json"
	if err := os.MkdirAll(dir+"/emulator", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(found, `{"UserConfig":{"Namespaces":[{"Name":"sbemulatorns","Queues":[{"Name":"orders","Properties":{}}]}],"Logging":{"Type":"Console"}}}`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	env := func(k string) (string, bool) {
		switch k {
		case "BUSBAR_LOG_FORMAT":
			return "json", true
		case "BUSBAR_CONFIG_SEARCH":
			return dir + "/missing/Config.json:" + found, true
		}
		return "", false
	}
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"serve", "--memory", "--amqp", "127.0.0.1:0", "--http", "127.0.0.1:0"}, io.Discard, &out, env)
	}()
	httpAddr := regexp.MustCompile(`"http":"([^"]+)"`)
	var addr string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := httpAddr.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
			break
		}
	}
	if addr == "" {
		cancel()
		<-done
		t.Fatalf("no ready log line with the http address; output:\n%s", out.String())
	}
	if !strings.Contains(out.String(), `"config":"`+found+`"`) {
		t.Errorf("serve did not log loading %s:\n%s", found, out.String())
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"health", "--http", addr}, &stdout, &stderr, noEnv); code != 0 {
		t.Errorf("health exit %d: %s", code, stderr.String())
	}
	// The address from BUSBAR_HTTP, with an unspecified host probed on loopback.
	_, port, _ := net.SplitHostPort(addr)
	httpEnv := func(k string) (string, bool) {
		if k == "BUSBAR_HTTP" {
			return "0.0.0.0:" + port, true
		}
		return "", false
	}
	if code := run(context.Background(), []string{"health"}, io.Discard, &stderr, httpEnv); code != 0 {
		t.Errorf("health from BUSBAR_HTTP exit %d: %s", code, stderr.String())
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exit code %d; output:\n%s", code, out.String())
	}
	stderr.Reset()
	if code := run(context.Background(), []string{"health", "--http", addr}, io.Discard, &stderr, noEnv); code != 1 || !strings.Contains(stderr.String(), "cannot reach") {
		t.Errorf("health of a stopped broker: exit %d, %q; want 1 and 'cannot reach'", code, stderr.String())
	}
	if code := run(context.Background(), []string{"health", "--http", "nonsense"}, io.Discard, &stderr, noEnv); code != 2 {
		t.Errorf("health --http nonsense: exit %d, want 2", code)
	}
}

func TestVersionCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"version"}, &stdout, &stderr, noEnv); code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr.String())
	}
	v := version.Get()
	if got, want := stdout.String(), "busbar "+v.String()+"\n"; got != want {
		t.Errorf("version printed %q, want %q", got, want)
	}
	stdout.Reset()
	if code := run(context.Background(), []string{"version", "--json"}, &stdout, &stderr, noEnv); code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr.String())
	}
	var got struct {
		Version, Commit, Go string
		Modified            bool
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil || got.Version != v.Version || got.Commit != v.Commit || got.Go != v.GoVersion {
		t.Errorf("version --json = %s (%v), want %+v", stdout.String(), err, v)
	}
	if code := run(context.Background(), []string{"version", "extra"}, io.Discard, io.Discard, noEnv); code == 0 {
		t.Error("version accepted an argument")
	}
}

// TestVersionLdflags builds the binary as a release would, with the version
// and commit set by the linker, and checks that they win.
func TestVersionLdflags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "busbar")
	const pkg = "github.com/busbarmq/busbar/internal/version"
	ld := "-X " + pkg + ".version=v9.8.7 -X " + pkg + ".commit=0123456789abcdef"
	if out, err := exec.Command("go", "build", "-ldflags", ld, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("busbar version: %v\n%s", err, out)
	}
	if !strings.HasPrefix(string(out), "busbar v9.8.7 (commit 0123456789abcdef, go1.") {
		t.Errorf("busbar version = %q", out)
	}
}

// TestUsageErrorsExitTwo: every mistake in the command line exits with 2,
// at the root and in the commands defined here (internal/cli tests its
// own); asking for help exits with 0.
func TestUsageErrorsExitTwo(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nonsense"}, `unknown command "nonsense" for "busbar"`},
		{[]string{"queu"}, "Did you mean this?\n\tqueue"},
		{[]string{"--bogus"}, "unknown flag: --bogus"},
		{[]string{"serve", "extra"}, `unknown command "extra" for "busbar serve"`},
		{[]string{"serve", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"health", "extra"}, `unknown command "extra" for "busbar health"`},
		{[]string{"version", "extra"}, `unknown command "extra" for "busbar version"`},
		{[]string{"version", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"queue", "bogus"}, `unknown command "bogus" for "busbar queue"`},
	} {
		var stderr bytes.Buffer
		if code := run(context.Background(), tc.args, io.Discard, &stderr, noEnv); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
	for _, args := range [][]string{{}, {"--help"}, {"serve", "--help"}, {"session", "--help"}} {
		var stdout bytes.Buffer
		if code := run(context.Background(), args, &stdout, io.Discard, noEnv); code != 0 || !strings.Contains(stdout.String(), "Usage:") {
			t.Errorf("%v: exit %d, stdout %q", args, code, stdout.String())
		}
	}
}
