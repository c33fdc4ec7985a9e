package cli

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/spf13/cobra"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/config"
)

// DefaultConnectionString is the Service Bus emulator's well-known
// connection string, used when neither --connection-string nor
// BUSBAR_CONNECTION_STRING is given.
const DefaultConnectionString = "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"

// DefaultAdminPort is the port of the management API when --admin is not
// given: the emulator's (and busbar serve's) HTTP port.
const DefaultAdminPort = "5300"

// Environment variables read by the commands.
const (
	EnvConnectionString = "BUSBAR_CONNECTION_STRING"
	EnvAdmin            = "BUSBAR_ADMIN"
)

// Commands returns the operator commands, to be added to the busbar root
// command. env looks up environment variables (os.LookupEnv in production).
// The commands write to the root's OutOrStdout and ErrOrStderr and read its
// InOrStdin; errors are returned, for the caller to print and turn into an
// exit code with ExitCode.
func Commands(env func(string) (string, bool)) []*cobra.Command {
	a := &app{env: env}
	cmds := []*cobra.Command{
		newQueueCmd(a),
		newTopicCmd(a),
		newSubscriptionCmd(a),
		newRuleCmd(a),
		newSendCmd(a),
		newPeekCmd(a),
		newReceiveCmd(a),
		newDLQCmd(a),
		newPurgeCmd(a),
		newSessionCmd(a),
		newExportCmd(a),
		newImportCmd(a),
		newFaultCmd(a),
		newTimeCmd(a),
		newNamespaceCmd(a),
		newHistoryCmd(a),
	}
	for _, c := range cmds {
		addExitCodes(c)
		c.SetFlagErrorFunc(flagError)
		c.PersistentFlags().StringVar(&a.connStr, "connection-string", "", "Service Bus connection string (env "+EnvConnectionString+"; default: the emulator's)")
		c.PersistentFlags().StringVar(&a.namespace, "namespace", "", "work in this namespace of a Busbar serving several: connect to NAME.localhost, dialling the connection string's address (default: the namespace the connection string names)")
		c.PersistentFlags().StringVar(&a.adminAddr, "admin", "", "management API address host:port, plain HTTP unless given as an https:// URL (env "+EnvAdmin+"; default for emulator connection strings with AMQP port "+DefaultAMQPPort+": the endpoint's host, port "+DefaultAdminPort+")")
	}
	return cmds
}

// exitCodesHelp ends every command's help.
const exitCodesHelp = "\n\nExit codes: 0 success, 1 failure, 2 usage error, 3 not found, 4 access denied, 5 already exists."

func addExitCodes(c *cobra.Command) {
	long := c.Long
	if long == "" {
		long = c.Short + "."
	}
	c.Long = long + exitCodesHelp
	for _, sub := range c.Commands() {
		addExitCodes(sub)
	}
}

// app holds what the commands share: the environment and the connection
// flags.
type app struct {
	env       func(string) (string, bool)
	connStr   string
	adminAddr string
	namespace string // --namespace: "" for the connection string's
}

// getenv is env with an empty value counting as unset.
func (a *app) getenv(key string) string {
	if a.env == nil {
		return ""
	}
	v, ok := a.env(key)
	if !ok {
		return ""
	}
	return strings.TrimSpace(v)
}

// connection returns the connection string to use, parsed.
func (a *app) connection() (string, auth.ConnectionString, error) {
	s := a.connStr
	from := "--connection-string"
	if s == "" {
		s, from = a.getenv(EnvConnectionString), EnvConnectionString
	}
	if s == "" {
		s, from = DefaultConnectionString, ""
	}
	cs, err := auth.ParseConnectionString(s)
	if err != nil {
		return "", cs, usageErrorf("%s: %v", from, err)
	}
	if a.namespace == "" {
		return s, cs, nil
	}
	return a.inNamespace(s, cs)
}

// inNamespace rewrites the connection string's endpoint to the host name
// that selects --namespace on a Busbar serving several namespaces
// (NAME.localhost, keeping the port). dialHost still gives the address
// to dial.
func (a *app) inNamespace(s string, cs auth.ConnectionString) (string, auth.ConnectionString, error) {
	if !cs.UseDevelopmentEmulator {
		return "", cs, usageErrorf("--namespace applies to Busbar's connection strings (UseDevelopmentEmulator=true); for Azure, use the namespace's own connection string")
	}
	if err := config.CheckNamespaceName(a.namespace); err != nil {
		return "", cs, usageErrorf("--namespace: %v", err)
	}
	host := a.namespace + ".localhost"
	if _, port, err := net.SplitHostPort(cs.Host); err == nil {
		host = net.JoinHostPort(host, port)
	}
	parts := strings.Split(s, ";")
	for i, p := range parts {
		if k, _, ok := strings.Cut(p, "="); ok && strings.EqualFold(strings.TrimSpace(k), "Endpoint") {
			parts[i] = "Endpoint=sb://" + host
		}
	}
	ns := cs
	ns.Endpoint, ns.Host = "sb://"+host, host
	return strings.Join(parts, ";"), ns, nil
}

// dialHost is the host[:port] to connect to for cs: with --namespace,
// the connection string's own address rather than NAME.localhost, which
// need not resolve.
func (a *app) dialHost(cs auth.ConnectionString) (string, error) {
	if a.namespace == "" {
		return cs.Host, nil
	}
	_, orig, err := a.withoutNamespace()
	return orig.Host, err
}

// withoutNamespace is connection as if --namespace were not given.
func (a *app) withoutNamespace() (string, auth.ConnectionString, error) {
	ns := a.namespace
	a.namespace = ""
	defer func() { a.namespace = ns }()
	return a.connection()
}

// nsHostHeader is the Host header of admin API requests to addr (the
// admin address): with --namespace, NAME.localhost on addr's port, which
// selects the namespace; else "" (addr itself).
func (a *app) nsHostHeader(addr string) string {
	if a.namespace == "" {
		return ""
	}
	if _, port, err := net.SplitHostPort(addr); err == nil {
		return net.JoinHostPort(a.namespace+".localhost", port)
	}
	return a.namespace + ".localhost"
}

// retryOptions make a command fail within seconds when the broker is down,
// instead of the SDK's minutes of backoff.
var retryOptions = azservicebus.RetryOptions{
	MaxRetries:    2,
	RetryDelay:    200 * time.Millisecond,
	MaxRetryDelay: time.Second,
}

// messaging returns an AMQP client. The caller closes it.
func (a *app) messaging() (*azservicebus.Client, error) {
	s, _, err := a.connection()
	if err != nil {
		return nil, err
	}
	opts := &azservicebus.ClientOptions{
		ApplicationID: "busbar-cli",
		RetryOptions:  retryOptions,
	}
	if a.namespace != "" {
		if opts.CustomEndpoint, err = a.dialHost(auth.ConnectionString{}); err != nil {
			return nil, err
		}
	}
	c, err := azservicebus.NewClientFromConnectionString(s, opts)
	if err != nil {
		return nil, usageErrorf("connection string: %v", err)
	}
	return c, nil
}

// withMessaging runs f with an AMQP client and closes it afterwards.
func (a *app) withMessaging(ctx context.Context, f func(*azservicebus.Client) error) error {
	c, err := a.messaging()
	if err != nil {
		return err
	}
	defer closeQuietly(ctx, c.Close)
	return f(c)
}

// adminClient is an admin client with the transport it was given, whose
// idle connections must be closed when the command is done.
type adminClient struct {
	*sbadmin.Client
	transport *http.Transport
}

func (c *adminClient) close() { c.transport.CloseIdleConnections() }

// admin returns a management client, speaking plain HTTP to the admin
// address when one applies (see the package documentation).
func (a *app) admin() (*adminClient, error) {
	s, cs, err := a.connection()
	if err != nil {
		return nil, err
	}
	scheme, addr, err := a.adminEndpoint(cs)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	opts := &sbadmin.ClientOptions{ClientOptions: azcore.ClientOptions{
		Retry: policy.RetryOptions{MaxRetries: 2, RetryDelay: 200 * time.Millisecond, MaxRetryDelay: time.Second},
	}}
	opts.Transport = &adminTransport{scheme: scheme, host: addr, hostHeader: a.nsHostHeader(addr), client: &http.Client{Transport: tr}}
	c, err := sbadmin.NewClientFromConnectionString(s, opts)
	if err != nil {
		return nil, usageErrorf("connection string: %v", err)
	}
	return &adminClient{Client: c, transport: tr}, nil
}

// adminEndpoint is the management API's scheme and host:port: --admin,
// else BUSBAR_ADMIN (plain HTTP unless given as an https:// URL), else,
// for an emulator connection string, its host on the admin port. addr is
// "" when none applies (the SDK then speaks https to the endpoint).
func (a *app) adminEndpoint(cs auth.ConnectionString) (scheme, addr string, err error) {
	addr = a.adminAddr
	if addr == "" {
		addr = a.getenv(EnvAdmin)
	}
	scheme = "http"
	switch {
	case strings.HasPrefix(addr, "http://"):
		addr = strings.TrimPrefix(addr, "http://")
	case strings.HasPrefix(addr, "https://"):
		scheme, addr = "https", strings.TrimPrefix(addr, "https://")
	}
	addr = strings.TrimSuffix(addr, "/")
	if addr == "" && cs.UseDevelopmentEmulator {
		host, err := a.dialHost(cs)
		if err != nil {
			return "", "", err
		}
		addr, err = emulatorAdminAddr(host)
		if err != nil {
			return "", "", err
		}
	}
	return scheme, addr, err
}

// DefaultAMQPPort is the AMQP port an emulator connection string means
// when its endpoint names none.
const DefaultAMQPPort = "5672"

// emulatorAdminAddr is the management API's address for an emulator
// connection string whose endpoint is host (host or host:port). The
// convention is the emulator's, and busbar serve's defaults: AMQP on 5672,
// the management API on 5300 of the same host. An endpoint naming another
// AMQP port follows no convention (the HTTP port is set on its own), so
// that is a usage error asking for --admin rather than a guess that could
// reach another broker's management API.
func emulatorAdminAddr(host string) (string, error) {
	port := DefaultAMQPPort
	if h, p, err := net.SplitHostPort(host); err == nil {
		host, port = h, p
	}
	if port != DefaultAMQPPort {
		return "", usageErrorf("the connection string's endpoint names AMQP port %s, so the management API's address cannot be derived from it (port %s goes with AMQP port %s only): give it with --admin HOST:PORT or %s", port, DefaultAdminPort, DefaultAMQPPort, EnvAdmin)
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), DefaultAdminPort), nil
}

// withAdmin runs f with a management client.
func (a *app) withAdmin(f func(*adminClient) error) error {
	c, err := a.admin()
	if err != nil {
		return err
	}
	defer c.close()
	return f(c)
}

// adminTransport sends the admin client's requests to the management API's
// real address: the Go admin client always builds https://<endpoint host>/…
// URLs, which reach neither busbar nor the emulator. It also adds the
// Status the Go admin client leaves out of subscription descriptions (see
// withSubscriptionStatus).
type adminTransport struct {
	scheme     string // "http" or "https"
	host       string // host:port; "" leaves the URLs alone (Azure)
	hostHeader string // the Host header when not host (--namespace)
	client     *http.Client
}

func (t *adminTransport) Do(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	if t.host != "" {
		r.URL.Scheme = t.scheme
		r.URL.Host = t.host
		r.Host = t.host
		if t.hostHeader != "" {
			r.Host = t.hostHeader
		}
	}
	if st, ok := r.Context().Value(subscriptionStatusKey{}).(sbadmin.EntityStatus); ok && r.Method == http.MethodPut && r.Body != nil {
		if err := addSubscriptionStatus(r, st); err != nil {
			return nil, err
		}
	}
	return t.client.Do(r)
}

type subscriptionStatusKey struct{}

// withSubscriptionStatus makes the subscription PUT made with ctx carry
// status. The Go admin client (v1.11.0) does not write a subscription's
// Status into the SubscriptionDescription it sends, so without this a
// created subscription is always Active, and an update, being a full
// replace, would make a disabled subscription Active again.
func withSubscriptionStatus(ctx context.Context, status *sbadmin.EntityStatus) context.Context {
	if status == nil || *status == "" {
		return ctx
	}
	return context.WithValue(ctx, subscriptionStatusKey{}, *status)
}

// addSubscriptionStatus inserts <Status> into r's SubscriptionDescription,
// where the schema puts it: after EnableBatchedOperations, before
// ForwardTo and the elements that follow it.
func addSubscriptionStatus(r *http.Request, status sbadmin.EntityStatus) error {
	body, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		return err
	}
	text := string(body)
	end := strings.Index(text, "</SubscriptionDescription>")
	if end >= 0 && !strings.Contains(text, "<Status>") {
		at := end
		for _, next := range []string{"<ForwardTo>", "<UserMetadata>", "<ForwardDeadLetteredMessagesTo>", "<AutoDeleteOnIdle>"} {
			if i := strings.Index(text, next); i >= 0 && i < at {
				at = i
			}
		}
		var b strings.Builder
		b.WriteString(text[:at])
		b.WriteString("<Status>")
		_ = xml.EscapeText(&b, []byte(status))
		b.WriteString("</Status>")
		b.WriteString(text[at:])
		body = []byte(b.String())
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return nil
}

// closeQuietly closes an SDK client, link or receiver, giving it a few
// seconds even when ctx is already done.
func closeQuietly(ctx context.Context, close func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = close(ctx)
}

// groupCmd is a command that only holds subcommands: run without one, or
// with an unknown one, it is a usage error.
func groupCmd(use, short, long string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("unknown command %q for %q\nRun '%s --help' for usage.", args[0], cmd.CommandPath(), cmd.CommandPath())
			}
			return usageErrorf("%s needs a subcommand\nRun '%s --help' for usage.", cmd.CommandPath(), cmd.CommandPath())
		},
	}
	c.AddCommand(subs...)
	return c
}

// addJSONFlag declares --json on cmd.
func addJSONFlag(cmd *cobra.Command, p *bool) {
	cmd.Flags().BoolVar(p, "json", false, "print JSON instead of a table")
}

// queueName names a queue in messages: queue "orders".
func queueName(name string) string { return fmt.Sprintf("queue %q", name) }
