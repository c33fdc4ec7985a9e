package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
)

// doc:begin (docs/testing-tools.md, "Message history", Go: kept verbatim there)

// historyEvent is one step of a message's life, as GET /$history answers it.
type historyEvent struct {
	Time      time.Time `json:"time"`
	Kind      string    `json:"kind"`
	Link      string    `json:"link"`
	LockToken string    `json:"lockToken"`
	Reason    string    `json:"reason"`
	To        string    `json:"to"`
}

// messageHistory reads the lives of the messages with id messageID in
// entity (and where they went: subscriptions, forwarding targets).
func messageHistory(adminURL, keyName, key, entity, messageID string) ([]historyEvent, error) {
	req, _ := http.NewRequest(http.MethodGet,
		adminURL+"/$history/"+entity+"/messages?message-id="+url.QueryEscape(messageID), nil)
	req.Header.Set("Authorization", sasToken(keyName, key, adminURL+"/"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("history: %s: %s", resp.Status, b)
	}
	var h struct {
		Messages []struct {
			Entity string         `json:"entity"`
			Events []historyEvent `json:"events"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return nil, err
	}
	var events []historyEvent
	for _, m := range h.Messages {
		events = append(events, m.Events...)
	}
	return events, nil
}

// doc:end

// sasToken is the docs' (the fault injection example's).
func sasToken(keyName, key, audience string) string {
	sr := strings.ToLower(url.QueryEscape(audience))
	se := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(sr + "\n" + se))
	sig := url.QueryEscape(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	return "SharedAccessSignature sr=" + sr + "&sig=" + sig + "&se=" + se + "&skn=" + keyName
}

// TestHistoryDocExample runs the Go example of docs/testing-tools.md
// against a real broker, and checks that the docs hold it verbatim.
func TestHistoryDocExample(t *testing.T) {
	src, err := os.ReadFile("history_doc_test.go")
	if err != nil {
		t.Fatal(err)
	}
	code := string(src)
	code = code[strings.Index(code, "\n\n// historyEvent")+2 : strings.Index(code, "// doc:end")]
	docs, err := os.ReadFile("../../docs/testing-tools.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(docs), strings.TrimSpace(code)) {
		t.Fatalf("docs/testing-tools.md does not hold the Go example of message histories as tested here:\n%s", code)
	}

	s := start(t, Options{Server: config.Server{Memory: true, History: "on"}})
	t.Cleanup(func() { stop(t, s) })
	if _, err := s.Broker().CreateQueue("orders", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := azservicebus.NewClientFromConnectionString(connectionString(s), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	sender, _ := client.NewSender("orders", nil)
	id := "order-1"
	if err := sender.SendMessage(ctx, &azservicebus.Message{MessageID: &id, Body: []byte("x")}, nil); err != nil {
		t.Fatal(err)
	}
	receiver, _ := client.NewReceiverForQueue("orders", nil)
	ms, err := receiver.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(ms) != 1 {
		t.Fatalf("receive: %v", err)
	}
	if err := receiver.CompleteMessage(ctx, ms[0], nil); err != nil {
		t.Fatal(err)
	}

	events, err := messageHistory("http://"+s.HTTPAddr().String(), "RootManageSharedAccessKey", emulatorKey, "orders", "order-1")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, ev := range events {
		kinds = append(kinds, ev.Kind)
	}
	if strings.Join(kinds, " ") != "enqueued delivered completed" || events[1].LockToken == "" || events[1].Link == "" {
		t.Fatalf("events %+v", events)
	}
}
