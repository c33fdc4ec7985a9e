package admin

import (
	"net/http"
	"time"
)

// NamespaceInfo describes the namespace (GET /$namespaceinfo).
type NamespaceInfo struct {
	Name string
	// SKU is the MessagingSKU: the tier's (busbar serve --tier), Standard
	// without one.
	SKU string
	// CreatedTime and ModifiedTime: the broker keeps no namespace
	// creation time, so both are when the Handler was made.
	CreatedTime  time.Time
	ModifiedTime time.Time
}

// NamespaceInfo returns the namespace's description.
func (h *Handler) NamespaceInfo() NamespaceInfo {
	return NamespaceInfo{Name: h.namespace, SKU: h.broker.Tier().SKU(), CreatedTime: h.started, ModifiedTime: h.started}
}

// getNamespaceInfo serves GET /$namespaceinfo. Its elements are in
// DataContract (alphabetical) order; Go dereferences content>NamespaceInfo
// without a nil check, JS requires CreatedTime, MessagingSKU, ModifiedTime
// and Name (§1.6).
func getNamespaceInfo(h *Handler, rq *request) (*reply, error) {
	ns := h.NamespaceInfo()
	m := entryMeta{id: rq.site.url("$namespaceinfo", ""), title: ns.Name, published: ns.CreatedTime, updated: ns.ModifiedTime, author: ns.Name}
	return rq.site.entry(http.StatusOK, m, func(w *xmlWriter) {
		w.open("NamespaceInfo", "xmlns", nsServiceBus, "xmlns:i", nsXSI)
		w.time("CreatedTime", ns.CreatedTime)
		w.text("MessagingSKU", ns.SKU)
		w.time("ModifiedTime", ns.ModifiedTime)
		w.text("Name", ns.Name)
		w.text("NamespaceType", "Messaging")
		w.close("NamespaceInfo")
	}), nil
}
