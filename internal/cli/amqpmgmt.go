package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/auth"
)

// The Go SDK does not expose every Service Bus management operation (it
// has no get-message-sessions), so mgmtClient makes those requests itself,
// with go-amqp, the way the SDKs do:
//
//	connect (amqp:// for an emulator connection string, else amqps://; SASL ANONYMOUS)
//	$cbs:                put-token (SAS token for amqp[s]://HOST/ENTITY) → status-code 200/202
//	ENTITY/$management:  application-properties {operation: OP}, body: map
//	                     → statusCode (200, 204 for "nothing"), statusDescription,
//	                       errorCondition, body: map
//
// Both links of each pair reply to a link-local address; one connection
// serves one command and is closed with it.

// mgmtTimeout bounds each management request.
const mgmtTimeout = 30 * time.Second

type mgmtClient struct {
	conn    *amqp.Conn
	sess    *amqp.Session
	host    string // host[:port], as in the connection string
	scheme  string // amqp or amqps
	cs      auth.ConnectionString
	replyTo string
}

// newMgmtClient connects to the namespace of the connection string.
func (a *app) newMgmtClient(ctx context.Context) (*mgmtClient, error) {
	_, cs, err := a.connection()
	if err != nil {
		return nil, err
	}
	scheme := "amqps"
	if cs.UseDevelopmentEmulator {
		scheme = "amqp"
	}
	host := cs.Host
	sni := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		sni = strings.Trim(h, "[]")
	}
	dial, err := a.dialHost(cs)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, mgmtTimeout)
	defer cancel()
	conn, err := amqp.Dial(ctx, scheme+"://"+dial+"/", &amqp.ConnOptions{
		SASLType:   amqp.SASLTypeAnonymous(),
		HostName:   sni,
		Properties: map[string]any{"product": "busbar-cli"},
	})
	if err != nil {
		return nil, err
	}
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	return &mgmtClient{conn: conn, sess: sess, host: host, scheme: scheme, cs: cs, replyTo: "busbar-cli-" + hex.EncodeToString(id[:])}, nil
}

func (m *mgmtClient) close() { _ = m.conn.Close() }

// putToken authorizes the connection for entity on $cbs.
func (m *mgmtClient) putToken(ctx context.Context, entity string) error {
	audience := m.scheme + "://" + m.host + "/" + entity
	token := m.cs.SharedAccessSignature
	expiry := time.Now().Add(time.Hour)
	if token == "" {
		token = auth.NewToken(m.cs.SharedAccessKeyName, m.cs.SharedAccessKey, audience, expiry)
	}
	props, _, err := m.rpc(ctx, "$cbs", &amqp.Message{
		ApplicationProperties: map[string]any{
			"operation":  "put-token",
			"type":       "servicebus.windows.net:sastoken",
			"name":       audience,
			"expiration": fmt.Sprint(expiry.Unix()),
		},
		Value: token,
	})
	if err != nil {
		return err
	}
	code, _ := props["status-code"].(int32)
	if code != 200 && code != 202 {
		desc, _ := props["status-description"].(string)
		return statusError(code, desc, props["errorCondition"])
	}
	return nil
}

// statusError is a management answer's failure as the *amqp.Error that
// entityError understands: the answer's errorCondition, else one from the
// status code.
func statusError(code int32, desc string, condition any) error {
	var cond amqp.ErrCond
	switch c := condition.(type) {
	case string:
		cond = amqp.ErrCond(c)
	case amqp.Symbol:
		cond = amqp.ErrCond(c)
	}
	if cond == "" {
		switch code {
		case 401, 403:
			cond = amqp.ErrCondUnauthorizedAccess
		case 404:
			cond = amqp.ErrCondNotFound
		default:
			cond = amqp.ErrCondInternalError
		}
	}
	return &amqp.Error{Condition: cond, Description: fmt.Sprintf("%s (status %d)", desc, code)}
}

// request sends operation op with body to entity's $management node and
// returns the answer's status code and body. A status other than 200 or
// 204 is returned as an *amqp.Error carrying the answer's errorCondition,
// which entityError understands.
func (m *mgmtClient) request(ctx context.Context, entity, op string, body map[string]any) (int32, map[string]any, error) {
	props, value, err := m.rpc(ctx, entity+"/$management", &amqp.Message{
		ApplicationProperties: map[string]any{"operation": op},
		Value:                 body,
	})
	if err != nil {
		return 0, nil, err
	}
	code, _ := props["statusCode"].(int32)
	if code != 200 && code != 204 {
		desc, _ := props["statusDescription"].(string)
		return code, nil, statusError(code, desc, props["errorCondition"])
	}
	out, _ := value.(map[string]any)
	return code, out, nil
}

// rpc sends req to node over a new link pair and waits for the answer,
// matched by correlation id.
func (m *mgmtClient) rpc(ctx context.Context, node string, req *amqp.Message) (map[string]any, any, error) {
	ctx, cancel := context.WithTimeout(ctx, mgmtTimeout)
	defer cancel()
	recv, err := m.sess.NewReceiver(ctx, node, &amqp.ReceiverOptions{TargetAddress: m.replyTo, Credit: 1})
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = recv.Close(context.WithoutCancel(ctx)) }()
	send, err := m.sess.NewSender(ctx, node, nil)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = send.Close(context.WithoutCancel(ctx)) }()
	var id [16]byte
	_, _ = rand.Read(id[:])
	msgID := hex.EncodeToString(id[:])
	replyTo := m.replyTo
	req.Properties = &amqp.MessageProperties{MessageID: msgID, ReplyTo: &replyTo}
	if err := send.Send(ctx, req, nil); err != nil {
		return nil, nil, err
	}
	for {
		resp, err := recv.Receive(ctx, nil)
		if err != nil {
			return nil, nil, err
		}
		_ = recv.AcceptMessage(ctx, resp)
		if resp.Properties != nil && resp.Properties.CorrelationID != msgID {
			continue
		}
		return resp.ApplicationProperties, resp.Value, nil
	}
}

// maxSessionIDs bounds a session listing: Service Bus session ids are
// at most 128 characters, so this is at most a few megabytes.
const maxSessionIDs = 100_000

// listSessions returns the ids of entity's sessions that hold messages
// or state (com.microsoft:get-message-sessions, a page at a time), and
// whether there were more than maxSessionIDs.
func (m *mgmtClient) listSessions(ctx context.Context, entity string, limit int) ([]string, bool, error) {
	if err := m.putToken(ctx, entity); err != nil {
		return nil, false, err
	}
	const page = 100
	// .NET's DateTime.MaxValue: sessions with messages or state,
	// whenever they were last updated.
	all := time.UnixMilli(253402300799999).UTC()
	var ids []string
	skip := int32(0)
	for {
		code, body, err := m.request(ctx, entity, "com.microsoft:get-message-sessions", map[string]any{
			"last-updated-time": all, "skip": skip, "top": int32(page),
		})
		if err != nil {
			return nil, false, err
		}
		if code == 204 {
			return ids, false, nil
		}
		got, _ := body["sessions-ids"].([]string)
		if len(got) == 0 {
			return ids, false, nil
		}
		for _, id := range got {
			if len(ids) == limit {
				return ids, true, nil
			}
			ids = append(ids, id)
		}
		if len(got) < page {
			return ids, false, nil
		}
		next, _ := body["skip"].(int32)
		if next <= skip {
			next = skip + int32(len(got))
		}
		skip = next
	}
}
