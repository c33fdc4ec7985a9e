package admin

import (
	"net/http"

	"github.com/busbarmq/busbar/internal/broker"
)

// withoutManage is the answer to a request whose token is valid but does
// not grant Manage, worded as Service Bus words it (the SDKs' live tests
// match these texts):
//
//   - reading a queue or topic that does not exist is 404, as with Manage
//     (the Go SDK's GetQueue then returns nil, nil);
//   - reading one that exists, or listing, is 401 "Manage,EntityRead claims
//     required for this operation." (the detail is that sentence alone);
//   - creating or updating is 401 "Authorization failed for specified
//     action: Manage,EntityWrite.", deleting "…: Manage,EntityDelete.";
//   - on subscriptions and rules, 401 "Unauthorized access for '<operation>'
//     operation: Manage claims are required." whether or not they exist.
func (h *Handler) withoutManage(rq *request) error {
	const read = "Manage,EntityRead claims required for this operation."
	denied := func(msg string) error { return &Error{Status: http.StatusUnauthorized, Msg: msg, Bare: true} }
	method := rq.r.Method
	switch rq.res.kind {
	case resEntity:
		switch method {
		case http.MethodGet:
			if _, err := h.broker.GetQueue(rq.res.entity); broker.KindOf(err) == broker.KindNotFound {
				if _, terr := h.broker.GetTopic(rq.res.entity); terr != nil && !h.remoteEntity(rq) {
					return notTopic(err, terr)
				}
			}
			return denied(read)
		case http.MethodPut:
			return errorf(http.StatusUnauthorized, "Authorization failed for specified action: Manage,EntityWrite.")
		case http.MethodDelete:
			return errorf(http.StatusUnauthorized, "Authorization failed for specified action: Manage,EntityDelete.")
		}
	case resSubscription, resSubscriptions, resRule, resRules:
		op := map[resourceKind]map[string]string{
			resSubscription:  {http.MethodGet: "GetSubscription", http.MethodPut: "CreateOrUpdateSubscription", http.MethodDelete: "DeleteSubscription"},
			resSubscriptions: {http.MethodGet: "EnumerateSubscriptions"},
			resRule:          {http.MethodGet: "GetRule", http.MethodPut: "CreateOrUpdateRule", http.MethodDelete: "DeleteRule"},
			resRules:         {http.MethodGet: "EnumerateRules"},
		}[rq.res.kind][method]
		if op != "" {
			return errorf(http.StatusUnauthorized, "Unauthorized access for '%s' operation: Manage claims are required.", op)
		}
	}
	if method == http.MethodGet {
		return denied(read) // lists, the namespace
	}
	return errorf(http.StatusUnauthorized, "Authorization failed for specified action: Manage,EntityWrite.")
}

// remoteEntity tells whether rq's entity is another cluster node's (it
// exists: the answer is the same as for one of this node's).
func (h *Handler) remoteEntity(rq *request) bool {
	cl := h.clusterOf()
	if cl == nil {
		return false
	}
	remote, err := cl.Remote(rq.r.Context(), unitOf(rq.res.entity))
	return err == nil && remote
}
