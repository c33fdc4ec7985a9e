package admin

// A Handler on a cluster node, with its Cluster answering from a second
// Handler (the "owner") in the same process: forwarding, the not-owner
// and unavailable answers, and lists merged from both.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
)

// ownerCluster is the Cluster of a node whose other node is owner: the
// units owner's broker serves are remote, and requests for them are run
// by owner's Handler as the internal listener runs them.
type ownerCluster struct {
	owner  *env
	down   bool   // the owner cannot be reached
	moving string // a unit with no node
	// movingFor is how many more Units calls report moving (< 0: all);
	// wait is MoveWait.
	movingFor int
	wait      time.Duration
	granted   []auth.Grant
	// place is the node Place names for new entities ("" this one),
	// with placeID; ids are the EntityIDHeader values forwarded.
	place   string
	placeID uint64
	ids     []string
}

func (c *ownerCluster) Place(context.Context) (uint64, string, error) {
	return c.placeID, c.place, nil
}

func (c *ownerCluster) MoveWait() time.Duration { return c.wait }

func (c *ownerCluster) serves(unit string) bool {
	_, ok := c.owner.b.EntityStoreID(unit)
	return ok
}

func (c *ownerCluster) Remote(_ context.Context, unit string) (bool, error) {
	return c.serves(unit) || strings.EqualFold(unit, c.moving), nil
}

func (c *ownerCluster) Forward(ctx context.Context, unit string, r *http.Request, g auth.Grant) (*http.Response, error) {
	if c.down || !c.serves(unit) {
		return nil, errors.New("connection refused")
	}
	return c.ForwardNode(ctx, "owner", r, g)
}

func (c *ownerCluster) Units(context.Context) ([]RemoteUnit, error) {
	var out []RemoteUnit
	for _, q := range c.owner.b.ListQueues() {
		out = append(out, RemoteUnit{Name: strings.ToLower(q.Name), Node: "owner"})
	}
	for _, t := range c.owner.b.ListTopics() {
		out = append(out, RemoteUnit{Name: strings.ToLower(t.Name), Node: "owner"})
	}
	if c.moving != "" && c.movingFor != 0 {
		out = append(out, RemoteUnit{Name: c.moving})
		c.movingFor--
	}
	return out, nil
}

func (c *ownerCluster) ForwardNode(_ context.Context, _ string, r *http.Request, g auth.Grant) (*http.Response, error) {
	if c.down {
		return nil, errors.New("connection refused")
	}
	c.granted = append(c.granted, g)
	if v := r.Header.Get(EntityIDHeader); v != "" {
		// The owner's broker is not a cluster one: it allocates its own.
		c.ids = append(c.ids, v)
		r.Header.Del(EntityIDHeader)
	}
	rec := httptest.NewRecorder()
	c.owner.h.ServeHTTP(rec, r.WithContext(WithPrincipal(r.Context(), g)))
	return rec.Result(), nil
}

func TestClusterForwarding(t *testing.T) {
	gw, owner := newEnv(t), newEnv(t)
	cl := &ownerCluster{owner: owner}
	gw.h.SetCluster(cl)
	for _, q := range []string{"b-remote", "d-remote"} {
		if _, err := owner.b.CreateQueue(q, broker.DefaultQueueProperties()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := owner.b.CreateTopic("events", broker.DefaultTopicProperties()); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"a-local", "c-local"} {
		if _, err := gw.b.CreateQueue(q, broker.DefaultQueueProperties()); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("unit-scoped requests run on the owner", func(t *testing.T) {
		if status, _, body := gw.do("GET", "/b-remote", ""); status != http.StatusOK || !strings.Contains(body, "<title type=\"text\">b-remote</title>") {
			t.Fatalf("GET a remote queue: %d\n%s", status, body)
		}
		if status, _, body := gw.do("PUT", "/events/Subscriptions/audit", subscriptionBody); status != http.StatusCreated {
			t.Fatalf("PUT a subscription of a remote topic: %d\n%s", status, body)
		}
		if _, err := owner.b.GetSubscription("events", "audit"); err != nil {
			t.Fatalf("the owner has no subscription: %v", err)
		}
		if status, _, body := gw.do("POST", "/$rules/dry-run", `{"topic": "events", "message": {"subject": "x"}}`); status != http.StatusOK || !strings.Contains(body, `"accepted":["audit"]`) {
			t.Fatalf("dry run on a remote topic: %d\n%s", status, body)
		}
		if status, _, body := gw.do("POST", "/d-remote/messages", "hi"); status != http.StatusCreated {
			t.Fatalf("send to a remote queue: %d\n%s", status, body)
		}
		if info, _ := owner.b.GetQueue("d-remote"); info.Counts.Active != 1 {
			t.Fatalf("the owner's queue has %d messages, want 1", info.Counts.Active)
		}
		if g := cl.granted[len(cl.granted)-1]; g.KeyName != auth.DefaultKeyName {
			t.Fatalf("forwarded with principal %+v", g)
		}
		// The gateway authenticates first: no token, no forwarding.
		n := len(cl.granted)
		gw.fails(http.StatusUnauthorized, "GET", "/b-remote", "", "Authorization", "")
		if len(cl.granted) != n {
			t.Fatal("an unauthenticated request was forwarded")
		}
	})

	t.Run("unanswered: 503 with Retry-After", func(t *testing.T) {
		cl.down = true
		defer func() { cl.down = false }()
		gw.fails(http.StatusServiceUnavailable, "GET", "/b-remote", "", "~b-remote", "~try again")
		_, hdr, _ := gw.do("DELETE", "/b-remote/messages/head", "")
		if hdr.Get("Retry-After") != "1" {
			t.Fatalf("Retry-After %q, want 1", hdr.Get("Retry-After"))
		}
		gw.fails(http.StatusServiceUnavailable, "GET", "/$Resources/Queues", "")
	})

	t.Run("a forwarded request for a unit the node does not serve is 421", func(t *testing.T) {
		owner.h.SetCluster(&ownerCluster{owner: gw})
		defer owner.h.cluster.Store(nil)
		r := httptest.NewRequest("GET", "/a-local", nil)
		rec := httptest.NewRecorder()
		owner.h.ServeHTTP(rec, r.WithContext(WithPrincipal(r.Context(), auth.Grant{KeyName: "k", Rights: auth.Manage})))
		if rec.Code != http.StatusMisdirectedRequest {
			t.Fatalf("got %d, want 421\n%s", rec.Code, rec.Body)
		}
	})

	t.Run("lists merge every node's entries", func(t *testing.T) {
		f := gw.list("/$Resources/Queues")
		if got := strings.Join(f.titles(), ","); got != "a-local,b-remote,c-local,d-remote" {
			t.Fatalf("queues %s", got)
		}
		f = gw.list("/$Resources/Queues?$skip=1&$top=2")
		if got := strings.Join(f.titles(), ","); got != "b-remote,c-local" || f.link("next") == "" {
			t.Fatalf("page 2 of 2: %s, next %q", got, f.link("next"))
		}
		f = gw.list("/$Resources/Queues?$skip=3&$top=2")
		if got := strings.Join(f.titles(), ","); got != "d-remote" || f.link("next") != "" {
			t.Fatalf("last page: %s, next %q", got, f.link("next"))
		}
		if got := strings.Join(gw.list("/$Resources/Topics").titles(), ","); got != "events" {
			t.Fatalf("topics %s", got)
		}
		// A unit moving for two tries: the list waits for it.
		cl.moving, cl.movingFor, cl.wait = "e-moving", 2, 10*time.Second
		defer func() { cl.moving, cl.wait = "", 0 }()
		start := time.Now()
		if got := strings.Join(gw.list("/$Resources/Topics").titles(), ","); got != "events" || cl.movingFor != 0 {
			t.Fatalf("topics %s after a move (moving %d more)", got, cl.movingFor)
		}
		if d := time.Since(start); d < listRetryFirst {
			t.Fatalf("answered in %v, before a retry", d)
		}
		// One that stays moving past the bound: 503.
		cl.movingFor, cl.wait = -1, 200*time.Millisecond
		start = time.Now()
		gw.fails(http.StatusServiceUnavailable, "GET", "/$Resources/Topics", "", "~e-moving")
		if d := time.Since(start); d < cl.wait {
			t.Fatalf("503 after %v, before the bound %v", d, cl.wait)
		}
	})

	t.Run("a local list is JSON, for forwarded requests only", func(t *testing.T) {
		r := httptest.NewRequest("GET", "/$Resources/Queues?$top=1", nil)
		r.Header.Set(LocalListHeader, "1")
		rec := httptest.NewRecorder()
		owner.h.ServeHTTP(rec, r.WithContext(WithPrincipal(r.Context(), auth.Grant{KeyName: "k", Rights: auth.Manage})))
		var ll localList
		if err := json.Unmarshal(rec.Body.Bytes(), &ll); err != nil || len(ll.Entries) != 1 || ll.Entries[0].Name != "b-remote" || len(ll.Units) != 3 {
			t.Fatalf("local list %+v, %v\n%s", ll, err, rec.Body)
		}
		// From a client the header changes nothing.
		if status, hdr, body := owner.do("GET", "/$Resources/Queues", "", LocalListHeader, "1"); status != http.StatusOK || hdr.Get("Content-Type") != contentTypeFeed {
			t.Fatalf("a client's list with %s: %d %s\n%s", LocalListHeader, status, hdr.Get("Content-Type"), body)
		}
	})
}

// TestClusterCreateOnPlacement: a creating PUT goes to the node
// placement chose, with the id allocated here; it is created here when
// that node does not answer, and a client's EntityIDHeader is ignored.
func TestClusterCreateOnPlacement(t *testing.T) {
	gw, owner := newEnv(t), newEnv(t)
	cl := &ownerCluster{owner: owner, place: "owner", placeID: 42}
	gw.h.SetCluster(cl)
	if status, _, body := gw.do("PUT", "/placed", queueBody); status != http.StatusCreated {
		t.Fatalf("create: %d\n%s", status, body)
	}
	if _, err := owner.b.GetQueue("placed"); err != nil {
		t.Fatalf("the chosen node has no queue: %v", err)
	}
	if _, err := gw.b.GetQueue("placed"); err == nil {
		t.Fatal("the queue was created here too")
	}
	if strings.Join(cl.ids, ",") != "42" {
		t.Fatalf("forwarded ids %v, want [42]", cl.ids)
	}
	if status, _, body := gw.do("PUT", "/placed-topic", newTopicBody); status != http.StatusCreated {
		t.Fatalf("create a topic: %d\n%s", status, body)
	}
	if _, err := owner.b.GetTopic("placed-topic"); err != nil {
		t.Fatalf("the chosen node has no topic: %v", err)
	}
	// A name that exists on the chosen node: its answer.
	gw.fails(http.StatusConflict, "PUT", "/placed", queueBody)

	// Placed here (id 0: this broker allocates, as a non-cluster one must).
	cl.place, cl.placeID = "", 0
	if status, _, body := gw.do("PUT", "/here", queueBody, EntityIDHeader, "7"); status != http.StatusCreated {
		t.Fatalf("create here with a client's %s: %d\n%s", EntityIDHeader, status, body)
	}
	if _, err := gw.b.GetQueue("here"); err != nil {
		t.Fatal(err)
	}
	// The chosen node cannot be reached: created here.
	cl.place, cl.down = "owner", true
	if status, _, body := gw.do("PUT", "/fallback", queueBody); status != http.StatusCreated {
		t.Fatalf("create with the chosen node down: %d\n%s", status, body)
	}
	if _, err := gw.b.GetQueue("fallback"); err != nil {
		t.Fatal(err)
	}
}

// TestClusterReadWithoutManage: reading another node's queue without
// Manage is 401, as for one of this node's; one that exists nowhere is
// 404.
func TestClusterReadWithoutManage(t *testing.T) {
	gw := newEnvWith(t, auth.Config{Policies: []auth.Policy{
		auth.DefaultPolicy(),
		{Name: "listener", PrimaryKey: "listen-key", Rights: auth.Listen},
	}})
	owner := newEnv(t)
	gw.h.SetCluster(&ownerCluster{owner: owner})
	if _, err := owner.b.CreateQueue("remote", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	listen := auth.NewToken("listener", "listen-key", "https://"+gw.host, time.Now().Add(time.Hour))
	gw.fails(http.StatusUnauthorized, "GET", "/remote", "", "Authorization", listen, "~Manage,EntityRead")
	gw.fails(http.StatusNotFound, "GET", "/nowhere", "", "Authorization", listen)
}

const queueBody = `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">` +
	`<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"/></content></entry>`

const newTopicBody = `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">` +
	`<TopicDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"/></content></entry>`

const subscriptionBody = `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">` +
	`<SubscriptionDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"/></content></entry>`
