package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/history"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

// FuzzHistoryRequest: any path and query under /$history is refused with
// a client error (400, or 404 for a message of which nothing is kept), or
// answers 200 with the histories asked for, never anything else.
func FuzzHistoryRequest(f *testing.F) {
	f.Add("$history/orders/messages/1", "")
	f.Add("$history/orders/messages", "message-id=m-1")
	f.Add("$history/t/Subscriptions/s/messages/1", "")
	f.Add("$history/orders/$DeadLetterQueue/messages/1", "")
	f.Add("$history/orders/messages/-1", "")
	f.Add("$history/orders/messages/1", "message-id=m-1")
	f.Add("$history//messages/1", "")
	f.Add("$history/orders/messages", "message-id=%ff%fe")
	f.Fuzz(func(t *testing.T, path, query string) {
		h := fuzzHistoryHandler(t)
		res, err := parseResource(path)
		if err != nil {
			wantClientError(t, err)
			return
		}
		if res.kind != resHistory {
			return
		}
		u := &url.URL{Path: "/" + path, RawQuery: query}
		r := &http.Request{Method: http.MethodGet, URL: u}
		rep, err := getHistory(h, &request{r: r, path: path, res: res})
		if err != nil {
			var ae *Error
			if !errors.As(err, &ae) || (ae.Status != http.StatusBadRequest && ae.Status != http.StatusNotFound) {
				t.Fatalf("not a client error: %v", err)
			}
			return
		}
		var ans history.Answer
		if rep.status != http.StatusOK || json.Unmarshal(rep.body, &ans) != nil || len(ans.Messages) == 0 {
			t.Fatalf("answered %d %s", rep.status, rep.body)
		}
	})
}

var fuzzHistoryBroker *broker.Broker

// fuzzHistoryHandler is a Handler on a broker whose history holds
// message 1 (id m-1) of orders.
func fuzzHistoryHandler(t *testing.T) *Handler {
	if fuzzHistoryBroker == nil {
		b, err := broker.Open(broker.Options{Store: memstore.New(), Clock: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
			History: history.New(history.Config{Mode: history.On})})
		if err != nil {
			t.Fatal(err)
		}
		b.History().Record("orders", 1, "m-1", history.Event{At: b.Now().UnixNano(), Kind: history.Enqueued})
		fuzzHistoryBroker = b
	}
	return &Handler{broker: fuzzHistoryBroker}
}
