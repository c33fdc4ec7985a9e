package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSOptions say how to run one nats-server.
type NATSOptions struct {
	Bin     string // nats-server built from the Go module proxy (2.15.2)
	WorkDir string
	Port    int  // 14222 default durability, 14223 sync_interval: always
	Always  bool // sync_interval: always (fsync before PubAck)
}

type natsProc struct {
	o    NATSOptions
	dir  string
	conf string
	mu   sync.Mutex
	cmd  *exec.Cmd
	log  *os.File
}

func (p *natsProc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *natsProc) DataDir() string { return p.dir }

func (p *natsProc) start(ctx context.Context, wait bool) error {
	logf, err := os.OpenFile(p.conf+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := brokerCommand(p.o.Bin, "-c", p.conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	go func() { _ = cmd.Wait() }()
	p.mu.Lock()
	p.cmd, p.log = cmd, logf
	p.mu.Unlock()
	if !wait {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return waitPort(wctx, fmt.Sprintf("127.0.0.1:%d", p.o.Port))
}

func (p *natsProc) stop(sig syscall.Signal) {
	p.mu.Lock()
	cmd, logf := p.cmd, p.log
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	for i := 0; i < 300 && alive(cmd.Process.Pid); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(cmd.Process.Pid) {
		_ = cmd.Process.Kill()
	}
	logf.Close()
}

// NewNATSTarget starts one nats-server and returns its target and a stop
// function.
func NewNATSTarget(ctx context.Context, o NATSOptions, doubleAck bool) (*Target, func(), error) {
	name := "default"
	if o.Always {
		name = "always"
	}
	p := &natsProc{o: o, dir: filepath.Join(o.WorkDir, "js-"+name), conf: filepath.Join(o.WorkDir, "nats-"+name+".conf")}
	os.RemoveAll(p.dir)
	conf := fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q", o.Port, p.dir)
	if o.Always {
		conf += ", sync_interval: always"
	}
	conf += " }\n"
	if err := os.WriteFile(p.conf, []byte(conf), 0o644); err != nil {
		return nil, nil, err
	}
	if err := p.start(ctx, true); err != nil {
		p.stop(syscall.SIGTERM)
		return nil, nil, err
	}
	c := &natsClient{url: fmt.Sprintf("nats://127.0.0.1:%d", o.Port), always: o.Always, doubleAck: doubleAck}
	t := &Target{Client: c, Proc: func() Process { return p },
		Fresh: func(ctx context.Context, queues []string, topics map[string][]string) error {
			for _, q := range queues {
				if err := c.CreateQueue(ctx, q); err != nil {
					return err
				}
			}
			return nil
		},
		Kill9Restart: func(ctx context.Context) error {
			p.stop(syscall.SIGKILL)
			return p.start(ctx, false)
		},
	}
	t.Note = "work-queue stream; Ack (not server-confirmed)"
	if doubleAck {
		serverConfirmedAcks(t)
	}
	return t, func() { p.stop(syscall.SIGTERM); os.RemoveAll(p.dir) }, nil
}

// serverConfirmedAcks switches a NATS target's receivers to DoubleAck:
// each ack waits for the server's confirmation (the variant of W2 that
// compares with a server-confirmed complete).
func serverConfirmedAcks(t *Target) {
	t.Client.(*natsClient).doubleAck = true
	t.Note = "work-queue stream; DoubleAck (server-confirmed)"
}

type natsClient struct {
	url       string
	always    bool
	doubleAck bool
}

func (c *natsClient) Name() string {
	s := "NATS 2.15 JetStream "
	if c.always {
		s += "sync_interval always"
	} else {
		s += "default sync (2 min)"
	}
	if c.doubleAck {
		s += ", double-ack"
	}
	return s
}

func (c *natsClient) Tier() string {
	if c.always {
		return "A"
	}
	return "B"
}

func (c *natsClient) Close() {}

func (c *natsClient) admin(ctx context.Context, f func(js jetstream.JetStream) error) error {
	nc, err := nats.Connect(c.url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return f(js)
}

func (c *natsClient) CreateQueue(ctx context.Context, q string) error {
	return c.admin(ctx, func(js jetstream.JetStream) error {
		_ = js.DeleteStream(ctx, q)
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: q, Subjects: []string{q}, Retention: jetstream.WorkQueuePolicy,
			Storage: jetstream.FileStorage, Replicas: 1, MaxBytes: -1, MaxMsgs: -1}); err != nil {
			return err
		}
		_, err := js.CreateOrUpdateConsumer(ctx, q, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy,
			MaxAckPending: 20000, AckWait: 5 * time.Minute, MaxDeliver: -1})
		return err
	})
}

func (c *natsClient) DeleteQueue(ctx context.Context, q string) error {
	return c.admin(ctx, func(js jetstream.JetStream) error { return js.DeleteStream(ctx, q) })
}

func (c *natsClient) CreateTopic(ctx context.Context, t string, subs []string) (string, []string, error) {
	var recv []string
	err := c.admin(ctx, func(js jetstream.JetStream) error {
		_ = js.DeleteStream(ctx, t)
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: t, Subjects: []string{t}, Retention: jetstream.InterestPolicy,
			Storage: jetstream.FileStorage, Replicas: 1, MaxBytes: -1, MaxMsgs: -1}); err != nil {
			return err
		}
		for _, s := range subs {
			if _, err := js.CreateOrUpdateConsumer(ctx, t, jetstream.ConsumerConfig{Durable: s, AckPolicy: jetstream.AckExplicitPolicy,
				MaxAckPending: 20000, AckWait: 5 * time.Minute, MaxDeliver: -1}); err != nil {
				return err
			}
			recv = append(recv, t+"/"+s)
		}
		return nil
	})
	return t, recv, err
}

func (c *natsClient) DeleteTopic(ctx context.Context, t string, subs []string) error {
	return c.DeleteQueue(ctx, t)
}

func (c *natsClient) Dial(ctx context.Context) (Conn, error) {
	nc, err := nats.Connect(c.url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &natsConn{c: c, nc: nc, js: js}, nil
}

type natsConn struct {
	c  *natsClient
	nc *nats.Conn
	js jetstream.JetStream
}

func (k *natsConn) Close() error { k.nc.Close(); return nil }

func (k *natsConn) NewSender(ctx context.Context, addr string) (Sender, error) {
	return &natsSender{js: k.js, subj: addr}, nil
}

func (k *natsConn) NewReceiver(ctx context.Context, addr string, credit int) (Receiver, error) {
	stream, cons := addr, "c"
	if i := strings.IndexByte(addr, '/'); i >= 0 {
		stream, cons = addr[:i], addr[i+1:]
	}
	if credit < 1 {
		credit = 1
	}
	cn, err := k.js.Consumer(ctx, stream, cons)
	if err != nil {
		return nil, err
	}
	ch := make(chan jetstream.Msg, credit)
	cc, err := cn.Consume(func(m jetstream.Msg) { ch <- m }, jetstream.PullMaxMessages(credit))
	if err != nil {
		return nil, err
	}
	return &natsReceiver{cc: cc, ch: ch, double: k.c.doubleAck}, nil
}

type natsSender struct {
	js   jetstream.JetStream
	subj string
}

func (s *natsSender) Send(ctx context.Context, body []byte) error {
	_, err := s.js.Publish(ctx, s.subj, body)
	return err
}

func (s *natsSender) Close() error { return nil }

type natsReceiver struct {
	cc     jetstream.ConsumeContext
	ch     chan jetstream.Msg
	double bool
}

func (r *natsReceiver) Receive(ctx context.Context) (Delivery, error) {
	select {
	case m := <-r.ch:
		return &natsDelivery{m: m, double: r.double}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (r *natsReceiver) Close() error {
	r.cc.Stop()
	return nil
}

type natsDelivery struct {
	m      jetstream.Msg
	double bool
}

func (d *natsDelivery) Body() []byte { return d.m.Data() }
func (d *natsDelivery) Settle(ctx context.Context) error {
	if d.double {
		return d.m.DoubleAck(ctx)
	}
	return d.m.Ack()
}

var _ = errors.New
