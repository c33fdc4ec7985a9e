package admin

import (
	"context"
	"net/http"
)

// Namespaces: Busbar's own endpoints on the default namespace for the
// namespaces one broker serves (Options.Namespaces; 404 elsewhere), with
// the API's authorisation (Manage) and its <Error> answers:
//
//	/$namespaces         GET     {"namespaces": [NamespaceEntry…]}, the default first
//	/$namespaces/{name}  DELETE  delete a namespace made for a key name
//	                             → 200 with its NamespaceEntry as it was
//
// Deleting closes the namespace's connections, its broker and store and
// removes its data directory; the next client with that key name makes a
// new, empty one. Namespaces from Config.json are refused with 400.

// NamespaceEntry describes one namespace in /$namespaces.
type NamespaceEntry struct {
	Name     string `json:"name"`
	Default  bool   `json:"default,omitempty"`
	Origin   string `json:"origin"` // "config" or "key-name"
	Entities int    `json:"entities"`
	DataDir  string `json:"dataDir,omitempty"` // "" in memory
}

// NamespaceManager lists and deletes the server's namespaces.
type NamespaceManager interface {
	ListNamespaces() []NamespaceEntry
	// DeleteNamespace deletes a namespace made for a key name and returns
	// what it was; its errors are the API's (broker errors, *Error).
	DeleteNamespace(ctx context.Context, name string) (NamespaceEntry, error)
}

type namespaceList struct {
	Namespaces []NamespaceEntry `json:"namespaces"`
}

func (h *Handler) namespaceManager() (NamespaceManager, error) {
	if h.namespaces == nil {
		return nil, errorf(http.StatusNotFound, "The namespaces are managed on the default namespace: send /$namespaces there (without a namespace's host name).")
	}
	return h.namespaces, nil
}

func listNamespaces(h *Handler, _ *request) (*reply, error) {
	m, err := h.namespaceManager()
	if err != nil {
		return nil, err
	}
	list := m.ListNamespaces()
	if list == nil {
		list = []NamespaceEntry{}
	}
	return jsonReply(http.StatusOK, namespaceList{Namespaces: list})
}

func deleteNamespace(h *Handler, rq *request) (*reply, error) {
	m, err := h.namespaceManager()
	if err != nil {
		return nil, err
	}
	info, err := m.DeleteNamespace(rq.r.Context(), rq.res.entity)
	if err != nil {
		return nil, err
	}
	h.log.Warn("namespace deleted", "namespace", info.Name, "dataDir", info.DataDir)
	return jsonReply(http.StatusOK, info)
}
