package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	amqp "github.com/Azure/go-amqp"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// RabbitOptions say how to run RabbitMQ 3.10: the
// package's own sbin scripts, node bench@localhost, everything on
// loopback and private ports, fresh directories under WorkDir.
type RabbitOptions struct {
	SbinDir  string // directory holding rabbitmq-server and rabbitmqctl
	WorkDir  string
	Port     int // AMQP (0.9.1 and 1.0) port, e.g. 25673
	DistPort int // Erlang distribution port, e.g. 25674
	EPMDPort int // epmd port, e.g. 24369
}

type rabbitProc struct {
	o    RabbitOptions
	base string
	mu   sync.Mutex
	cmd  *exec.Cmd
	log  *os.File
	pid  int // beam.smp
	epmd int
}

func (r *rabbitProc) PID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pid
}

func (r *rabbitProc) DataDir() string { return filepath.Join(r.base, "mnesia") }

func (r *rabbitProc) env() []string {
	b := r.base
	return append(os.Environ(),
		"HOME="+filepath.Join(b, "home"),
		"RABBITMQ_NODENAME=bench@localhost",
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		fmt.Sprintf("RABBITMQ_NODE_PORT=%d", r.o.Port),
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d", r.o.DistPort),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		fmt.Sprintf("ERL_EPMD_PORT=%d", r.o.EPMDPort),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(b, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(b, "log"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(b, "rabbitmq"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(b, "enabled_plugins"),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=+S 2 -kernel inet_dist_use_interface {127,0,0,1}",
	)
}

func (r *rabbitProc) setup() error {
	r.base = filepath.Join(r.o.WorkDir, "rabbitmq")
	os.RemoveAll(r.base)
	for _, d := range []string{"home", "mnesia", "log"} {
		if err := os.MkdirAll(filepath.Join(r.base, d), 0o755); err != nil {
			return err
		}
	}
	conf := fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nloopback_users = none\n", r.o.Port)
	if err := os.WriteFile(filepath.Join(r.base, "rabbitmq.conf"), []byte(conf), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.base, "enabled_plugins"), []byte("[rabbitmq_amqp1_0].\n"), 0o644)
}

// start launches the server script and returns once the AMQP port
// accepts connections (wait) or right after launch (!wait).
func (r *rabbitProc) start(ctx context.Context, wait bool) error {
	logf, err := os.OpenFile(filepath.Join(r.base, "server.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := brokerCommand(filepath.Join(r.o.SbinDir, "rabbitmq-server"))
	cmd.Env = r.env()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	go func() { _ = cmd.Wait() }()
	r.mu.Lock()
	r.cmd, r.log, r.pid = cmd, logf, 0
	r.mu.Unlock()
	if !wait {
		go r.findPID(context.Background())
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	if err := waitPort(wctx, fmt.Sprintf("127.0.0.1:%d", r.o.Port)); err != nil {
		return fmt.Errorf("rabbitmq did not start: %w (see %s)", err, logf.Name())
	}
	r.findPID(ctx)
	if r.epmd == 0 {
		r.epmd = pidListening(r.o.EPMDPort)
	}
	return nil
}

func (r *rabbitProc) findPID(ctx context.Context) {
	for i := 0; i < 1200; i++ {
		if pid := pidListening(r.o.Port); pid != 0 {
			r.mu.Lock()
			r.pid = pid
			r.mu.Unlock()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (r *rabbitProc) kill9() {
	pid := r.PID()
	if pid == 0 {
		pid = pidListening(r.o.Port)
	}
	if pid != 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for i := 0; i < 500 && alive(pid); i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	r.mu.Lock()
	if r.cmd != nil && r.cmd.Process != nil {
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL) // the script's process group
	}
	r.cmd, r.pid = nil, 0
	r.mu.Unlock()
	for i := 0; i < 300 && !portFree(r.o.Port); i++ {
		time.Sleep(10 * time.Millisecond)
	}
}

// stop stops the node with rabbitmqctl, then the epmd it spawned, by PID.
func (r *rabbitProc) stop() {
	ctl := exec.Command(filepath.Join(r.o.SbinDir, "rabbitmqctl"), "stop")
	ctl.Env = r.env()
	_ = ctl.Run()
	pid := r.PID()
	for i := 0; i < 300 && pid != 0 && alive(pid); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if pid != 0 && alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if r.epmd == 0 {
		r.epmd = pidListening(r.o.EPMDPort)
	}
	if r.epmd != 0 {
		_ = syscall.Kill(r.epmd, syscall.SIGTERM)
	}
	if r.log != nil {
		r.log.Close()
	}
	// Keep the logs, drop the (large) message store.
	os.RemoveAll(filepath.Join(r.base, "mnesia"))
}

// rabbitAdmin declares and deletes queues over AMQP 0.9.1.
type rabbitAdmin struct {
	url    string
	quorum bool
}

func (a *rabbitAdmin) do(f func(ch *amqp091.Channel) error) error {
	conn, err := amqp091.Dial(a.url)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	return f(ch)
}

func (a *rabbitAdmin) args() amqp091.Table {
	if a.quorum {
		return amqp091.Table{"x-queue-type": "quorum"}
	}
	return amqp091.Table{"x-queue-version": 2}
}

// declare deletes q if it exists and declares it again, empty.
func (a *rabbitAdmin) declare(ctx context.Context, q string) error {
	if err := a.do(func(ch *amqp091.Channel) error {
		_, _ = ch.QueueDelete(q, false, false, false)
		return nil
	}); err != nil {
		return err
	}
	return a.do(func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare(q, true, false, false, false, a.args())
		return err
	})
}

func (a *rabbitAdmin) delete(ctx context.Context, q string) error {
	return a.do(func(ch *amqp091.Channel) error {
		_, err := ch.QueueDelete(q, false, false, false)
		return err
	})
}

// topic declares a fanout exchange t bound to one queue per subscription.
func (a *rabbitAdmin) topic(ctx context.Context, t string, subs []string) (string, []string, error) {
	var recv []string
	err := a.do(func(ch *amqp091.Channel) error {
		_ = ch.ExchangeDelete(t, false, false)
		return nil
	})
	if err != nil {
		return "", nil, err
	}
	err = a.do(func(ch *amqp091.Channel) error {
		if err := ch.ExchangeDeclare(t, "fanout", true, false, false, false, nil); err != nil {
			return err
		}
		for _, s := range subs {
			q := t + "." + s
			recv = append(recv, q)
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		return nil
	})
	if err != nil {
		return "", nil, err
	}
	err = a.do(func(ch *amqp091.Channel) error {
		for _, q := range recv {
			if _, err := ch.QueueDeclare(q, true, false, false, false, a.args()); err != nil {
				return err
			}
			if err := ch.QueueBind(q, "", t, false, nil); err != nil {
				return err
			}
		}
		return nil
	})
	return "exchange:" + t, recv, err
}

func (a *rabbitAdmin) deleteTopic(ctx context.Context, t string, subs []string) error {
	return a.do(func(ch *amqp091.Channel) error {
		for _, s := range subs {
			_, _ = ch.QueueDelete(t+"."+s, false, false, false)
		}
		return ch.ExchangeDelete(t, false, false)
	})
}

// NewRabbitTargets starts RabbitMQ and returns its targets (quorum queues
// over AMQP 1.0 with go-amqp and over AMQP 0.9.1) and a stop function.
func NewRabbitTargets(ctx context.Context, o RabbitOptions) ([]*Target, func(), error) {
	r := &rabbitProc{o: o}
	if err := r.setup(); err != nil {
		return nil, nil, err
	}
	if err := r.start(ctx, true); err != nil {
		r.stop()
		return nil, nil, err
	}
	url091 := fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", o.Port)
	adm := &rabbitAdmin{url: url091, quorum: true}
	proc := func() Process { return r }
	fresh := func(ctx context.Context, queues []string, topics map[string][]string) error {
		for _, q := range queues {
			if err := adm.declare(ctx, q); err != nil {
				return err
			}
		}
		return nil
	}
	kill := func(ctx context.Context) error {
		r.kill9()
		return r.start(ctx, false)
	}
	c10 := &amqp10Client{name: "RabbitMQ 3.10 quorum (AMQP 1.0, go-amqp)", tier: "A",
		url: fmt.Sprintf("amqp://127.0.0.1:%d", o.Port), addr: func(q string) string {
			if strings.HasPrefix(q, "exchange:") {
				return "/exchange/" + strings.TrimPrefix(q, "exchange:")
			}
			return "/amq/queue/" + q
		},
		sasl: amqp.SASLTypePlain("guest", "guest"), minCredit: 5000, topic: adm.topic, delTopic: adm.deleteTopic}
	c091 := &rabbit091Client{url: url091, adm: adm}
	t10 := &Target{Client: c10, Proc: proc, Fresh: fresh, Kill9Restart: kill,
		Note: "accept with rcv-settle-mode first (not server-confirmed); credit 5000 (3.10 plugin stalls at ≤ 1000)"}
	t091 := &Target{Client: c091, Proc: proc, Fresh: fresh, Kill9Restart: kill,
		Note: "publisher confirms; basic.ack (not server-confirmed)"}
	return []*Target{t10, t091}, r.stop, nil
}

// rabbit091Client is RabbitMQ's own protocol with amqp091-go.
type rabbit091Client struct {
	url string
	adm *rabbitAdmin
}

func (c *rabbit091Client) Name() string { return "RabbitMQ 3.10 quorum (AMQP 0.9.1)" }
func (c *rabbit091Client) Tier() string { return "A" }
func (c *rabbit091Client) Close()       {}
func (c *rabbit091Client) CreateQueue(ctx context.Context, q string) error {
	return c.adm.declare(ctx, q)
}
func (c *rabbit091Client) DeleteQueue(ctx context.Context, q string) error {
	return c.adm.delete(ctx, q)
}
func (c *rabbit091Client) CreateTopic(ctx context.Context, t string, subs []string) (string, []string, error) {
	return c.adm.topic(ctx, t, subs)
}
func (c *rabbit091Client) DeleteTopic(ctx context.Context, t string, subs []string) error {
	return c.adm.deleteTopic(ctx, t, subs)
}

func (c *rabbit091Client) Dial(ctx context.Context) (Conn, error) {
	conn, err := amqp091.Dial(c.url)
	if err != nil {
		return nil, err
	}
	return &rabbit091Conn{conn: conn}, nil
}

type rabbit091Conn struct{ conn *amqp091.Connection }

func (k *rabbit091Conn) Close() error { return k.conn.Close() }

func (k *rabbit091Conn) NewSender(ctx context.Context, addr string) (Sender, error) {
	ch, err := k.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		return nil, err
	}
	exch, key := "", addr
	if strings.HasPrefix(addr, "exchange:") {
		exch, key = strings.TrimPrefix(addr, "exchange:"), ""
	}
	return &rabbit091Sender{ch: ch, exch: exch, key: key}, nil
}

func (k *rabbit091Conn) NewReceiver(ctx context.Context, addr string, credit int) (Receiver, error) {
	ch, err := k.conn.Channel()
	if err != nil {
		return nil, err
	}
	if credit < 1 {
		credit = 1
	}
	if err := ch.Qos(credit, 0, false); err != nil {
		return nil, err
	}
	d, err := ch.Consume(addr, "", false, false, false, false, nil)
	if err != nil {
		return nil, err
	}
	return &rabbit091Receiver{ch: ch, d: d}, nil
}

type rabbit091Sender struct {
	ch        *amqp091.Channel
	exch, key string
}

func (s *rabbit091Sender) Send(ctx context.Context, body []byte) error {
	dc, err := s.ch.PublishWithDeferredConfirmWithContext(ctx, s.exch, s.key, false, false,
		amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: body})
	if err != nil {
		return err
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("nack")
	}
	return nil
}

func (s *rabbit091Sender) Close() error { return s.ch.Close() }

type rabbit091Receiver struct {
	ch *amqp091.Channel
	d  <-chan amqp091.Delivery
}

func (r *rabbit091Receiver) Receive(ctx context.Context) (Delivery, error) {
	select {
	case d, ok := <-r.d:
		if !ok {
			return nil, fmt.Errorf("consumer closed")
		}
		return &rabbit091Delivery{d: d}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (r *rabbit091Receiver) Close() error { return r.ch.Close() }

type rabbit091Delivery struct{ d amqp091.Delivery }

func (d *rabbit091Delivery) Body() []byte                     { return d.d.Body }
func (d *rabbit091Delivery) Settle(ctx context.Context) error { return d.d.Ack(false) }
