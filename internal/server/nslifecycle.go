package server

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/admin"
	"github.com/busbarmq/busbar/internal/broker"
)

// The lifecycle of namespaces made for key names: the default
// namespace's admin API lists every namespace and deletes those
// (GET /$namespaces, DELETE /$namespaces/NAME; package admin's
// namespaces.go). Deleting one, in this order:
//
//  1. under the registry's lock: out of the registry, its name marked as
//     being deleted (a client with that key name is refused with
//     amqp:connection:forced / 503 until the deletion ends, so a new
//     namespace never opens the directory being removed);
//  2. its AMQP connections are closed with amqp:not-found, as for a
//     namespace that no longer exists, and waited for (at most
//     nsDrainTimeout), so no connection uses its broker after 3;
//  3. its timers stop, its console's jobs end, its broker and store
//     close, its metrics series go, its data directory is removed;
//  4. the name is free: the next client with that key name makes a new,
//     empty namespace (with Config.json's entities for the default one).

// nsDrainTimeout bounds how long a deletion waits for the namespace's
// connections to end.
const nsDrainTimeout = 10 * time.Second

var _ admin.NamespaceManager = (*nsRegistry)(nil)

// entry describes n for /$namespaces.
func (r *nsRegistry) entry(n *namespace) admin.NamespaceEntry {
	e := admin.NamespaceEntry{Name: nsLabel(n.name), Default: n == r.def, Origin: n.origin(), DataDir: n.dir}
	e.Entities = len(n.broker.ListQueues())
	for _, t := range n.broker.ListTopics() {
		e.Entities++
		subs, _ := n.broker.ListSubscriptions(t.Name)
		e.Entities += len(subs)
	}
	return e
}

// ListNamespaces implements admin.NamespaceManager.
func (r *nsRegistry) ListNamespaces() []admin.NamespaceEntry {
	list := r.list()
	out := make([]admin.NamespaceEntry, 0, len(list))
	for _, n := range list {
		out = append(out, r.entry(n))
	}
	return out
}

// DeleteNamespace implements admin.NamespaceManager.
func (r *nsRegistry) DeleteNamespace(_ context.Context, name string) (admin.NamespaceEntry, error) {
	key := strings.ToLower(name)
	r.mu.Lock()
	n := r.byName[key]
	switch {
	case r.removing[key]:
		r.mu.Unlock()
		return admin.NamespaceEntry{}, &admin.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("The namespace '%s' is being deleted already.", name)}
	case n == nil:
		r.mu.Unlock()
		return admin.NamespaceEntry{}, &broker.Error{Kind: broker.KindNotFound, Msg: fmt.Sprintf("There is no namespace '%s'; GET /$namespaces lists them.", name)}
	case !n.keyName:
		r.mu.Unlock()
		return admin.NamespaceEntry{}, &admin.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("The namespace '%s' is declared in Config.json; only namespaces made for a key name (--namespace-per-key-name) can be deleted.", n.name)}
	case r.closed:
		r.mu.Unlock()
		return admin.NamespaceEntry{}, &broker.Error{Kind: broker.KindClosed, Msg: "The broker is shutting down."}
	}
	r.removing[key] = true
	r.all = slices.DeleteFunc(r.all, func(m *namespace) bool { return m == n })
	delete(r.byName, key)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.removing, key)
		r.mu.Unlock()
	}()
	info := r.entry(n)

	gone := n.sb.Close(&broker.Error{Kind: broker.KindNotFound, Msg: fmt.Sprintf(
		"The messaging entity 'sb://%s/' could not be found: the namespace '%s' was deleted.", n.name, n.name)})
	t := time.NewTimer(nsDrainTimeout)
	select {
	case <-gone:
	case <-t.C:
		r.log.Warn("deleting a namespace: its connections did not end in time", "namespace", n.name, "timeout", nsDrainTimeout)
	}
	t.Stop()
	n.stopTimers()
	<-n.timersDone
	if r.onRemove != nil {
		r.onRemove(n)
	}
	err := n.close()
	if r.labelled {
		n.metrics.Release()
	}
	if n.dir != "" {
		if rerr := os.RemoveAll(n.dir); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil {
		r.log.Error("deleting a namespace", "namespace", n.name, "err", err)
		return info, &broker.Error{Kind: broker.KindInternal, Msg: fmt.Sprintf("The namespace '%s' was closed, but removing it failed: %v", n.name, err)}
	}
	r.log.Info("namespace deleted", "namespace", n.name, "dataDir", n.dir)
	return info, nil
}
