package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/version"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childBrokerEnv); dir != "" {
		childBroker(dir) // the broker process of TestLargeMessageMemory
		return
	}
	goleak.VerifyTestMain(m)
}

func start(t *testing.T, o Options) *Server {
	t.Helper()
	if o.AMQPAddr == "" {
		o.AMQPAddr = "127.0.0.1:0"
	}
	if o.HTTPAddr == "" {
		o.HTTPAddr = "127.0.0.1:0"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Start(ctx, o)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return s
}

func stop(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func TestHealthAndShutdown(t *testing.T) {
	s := start(t, Options{Server: config.Server{Memory: true}})
	code, body := get(t, "http://"+s.HTTPAddr().String()+"/health")
	want := `{"status":"healthy","version":"` + version.Version() + `"}`
	if code != 200 || body != want {
		t.Fatalf("health = %d %s, want 200 %s", code, body, want)
	}
	stop(t, s)
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
}

func TestHealthBeforeReady(t *testing.T) {
	var h health
	rec := &recorder{header: http.Header{}}
	h.ServeHTTP(rec, nil)
	if rec.code != http.StatusServiceUnavailable {
		t.Fatalf("health before ready = %d, want 503", rec.code)
	}
}

type recorder struct {
	header http.Header
	code   int
	body   strings.Builder
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = 200
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(code int) { r.code = code }

const sampleConfig = `{
  // Busbar accepts the emulator's Config.json verbatim.
  "UserConfig": {
    "Namespaces": [
      {
        "Name": "sbemulatorns",
        "Queues": [
          {
            "Name": "queue.1",
            "Properties": {
              "DeadLetteringOnMessageExpiration": false,
              "DefaultMessageTimeToLive": "PT1H",
              "DuplicateDetectionHistoryTimeWindow": "PT20S",
              "ForwardDeadLetteredMessagesTo": "",
              "ForwardTo": "",
              "LockDuration": "PT1M",
              "MaxDeliveryCount": 3,
              "RequiresDuplicateDetection": false,
              "RequiresSession": false
            }
          },
          { "Name": "long-lived", "Properties": { "DefaultMessageTimeToLive": "P14D", "MaxDeliveryCount": 50 } }
        ],
        "Topics": []
      }
    ],
    "Logging": { "Type": "File" }
  }
}`

func TestConfigEntitiesPersistAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	ec, err := config.LoadEmulatorConfig(strings.NewReader(sampleConfig))
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, Options{Server: config.Server{DataDir: dir}, Entities: ec})
	q, err := s.Broker().GetQueue("queue.1")
	if err != nil {
		t.Fatal(err)
	}
	if q.Properties.MaxDeliveryCount != 3 || q.Properties.LockDuration != time.Minute {
		t.Fatalf("queue.1 properties = %+v", q.Properties)
	}
	long, err := s.Broker().GetQueue("long-lived")
	if err != nil {
		t.Fatal(err)
	}
	if long.Properties.DefaultMessageTimeToLive != 14*24*time.Hour || long.Properties.MaxDeliveryCount != 50 {
		t.Fatalf("long-lived beyond the emulator's quotas = %+v", long.Properties)
	}
	// An entity created at run time survives a restart with a config that
	// does not name it; one named in the config is updated.
	if _, err := s.Broker().CreateQueue("runtime", s.Broker().ListQueues()[0].Properties); err != nil {
		t.Fatal(err)
	}
	stop(t, s)

	ec2, err := config.LoadEmulatorConfig(strings.NewReader(strings.Replace(sampleConfig, `"MaxDeliveryCount": 3`, `"MaxDeliveryCount": 7`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	s = start(t, Options{Server: config.Server{DataDir: dir}, Entities: ec2})
	defer stop(t, s)
	if _, err := s.Broker().GetQueue("runtime"); err != nil {
		t.Fatalf("runtime queue lost across restart: %v", err)
	}
	q, err = s.Broker().GetQueue("queue.1")
	if err != nil {
		t.Fatal(err)
	}
	if q.Properties.MaxDeliveryCount != 7 {
		t.Fatalf("queue.1 not updated from config: MaxDeliveryCount = %d", q.Properties.MaxDeliveryCount)
	}
}

func TestInvalidEntityFailsStart(t *testing.T) {
	ec, err := config.LoadEmulatorConfig(strings.NewReader(`{"UserConfig":{"Namespaces":[{"Name":"sbemulatorns","Queues":[{"Name":"a","Properties":{"ForwardTo":"a"}}]}],"Logging":{"Type":"Console"}}}`))
	if err != nil {
		// The loader caught it; that is the clear error we want.
		return
	}
	_, err = Start(context.Background(), Options{Server: config.Server{Memory: true, AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}, Entities: ec})
	if err == nil {
		t.Fatal("Start accepted a queue forwarding to itself")
	}
}

func TestBadDataDirFailsStart(t *testing.T) {
	_, err := Start(context.Background(), Options{Server: config.Server{DataDir: "/proc/busbar-cannot-write-here", AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}})
	if err == nil {
		t.Fatal("Start succeeded on an unusable data directory")
	}
}

// TestQueueNamedHealth: the probe's path does not hide an entity named
// "health" from the admin API, which always sends api-version. (The Go
// admin client speaks only https.)
func TestQueueNamedHealth(t *testing.T) {
	s := start(t, Options{Server: config.Server{DataDir: t.TempDir(), DevTLS: true, HTTPSAddr: "127.0.0.1:0"}})
	defer stop(t, s)
	pem, err := os.ReadFile(s.DevCertificate())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	transport := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}, Timeout: 10 * time.Second}
	cs := "Endpoint=sb://localhost:" + portOf(t, s.HTTPSAddr().String()) + ";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE"
	adm, err := admin.NewClientFromConnectionString(cs, &admin.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: transport, Retry: policy.RetryOptions{MaxRetries: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := adm.CreateQueue(ctx, "health", nil); err != nil {
		t.Fatalf("CreateQueue health: %v", err)
	}
	q, err := adm.GetQueue(ctx, "health", nil)
	if err != nil || q == nil || q.QueueName != "health" {
		t.Fatalf("GetQueue health = %+v, %v", q, err)
	}
	if code, body := get(t, "http://"+s.HTTPAddr().String()+"/health"); code != 200 || !strings.HasPrefix(body, `{"status":"healthy",`) {
		t.Fatalf("health = %d %s", code, body)
	}
}

// TestPprof: --pprof serves the runtime's profiles on its own listener,
// and Shutdown stops it (goleak checks the goroutine is gone).
func TestPprof(t *testing.T) {
	s := start(t, Options{Server: config.Server{Memory: true, PprofAddr: "127.0.0.1:0"}})
	if code, body := get(t, "http://"+s.PprofAddr().String()+"/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Fatalf("GET /debug/pprof/ = %d %.80s", code, body)
	}
	if code, _ := get(t, "http://"+s.HTTPAddr().String()+"/debug/pprof/"); code == 200 {
		t.Fatal("profiles are served on the admin port too")
	}
	stop(t, s)
	if s2 := start(t, Options{Server: config.Server{Memory: true}}); s2.PprofAddr() != nil {
		t.Fatal("PprofAddr set without PprofAddr option")
	} else {
		stop(t, s2)
	}
}
