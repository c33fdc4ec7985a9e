package admin

import (
	"net/http"
	"slices"
	"strings"
)

// resourceKind is what a path names.
type resourceKind uint8

const (
	resNamespaceInfo resourceKind = iota // $namespaceinfo
	resQueues                            // $Resources/Queues
	resTopics                            // $Resources/Topics
	resEntity                            // {entity}: a queue or a topic
	resSubscriptions                     // {topic}/Subscriptions
	resSubscription                      // {topic}/Subscriptions/{sub}
	resRules                             // {topic}/Subscriptions/{sub}/Rules
	resRule                              // {topic}/Subscriptions/{sub}/Rules/{rule}
	resFaults                            // $faults (faults.go)
	resFault                             // $faults/{id}
	resDryRun                            // $rules/dry-run (dryrun.go)
	resTime                              // $time (testclock.go)
	resTimeAdvance                       // $time/advance
	resTimeSet                           // $time/set
	resHistory                           // $history/{entity}/messages[/{seq}] (history.go)
	resNamespaces                        // $namespaces (namespaces.go)
	resNamespace                         // $namespaces/{name}
)

// resource is a parsed request path.
type resource struct {
	kind         resourceKind
	entity       string // queue or topic path (may contain '/')
	subscription string
	rule         string
	seq          string // $history: the sequence number asked for ("" for ?message-id=)
}

// parseResource classifies a decoded path (no leading or trailing '/').
// Path words match case-insensitively: Go and JS send "$Resources/Queues"
// and "Subscriptions", .NET "$Resources/queues", Java "subscriptions"
// (§1.2). Since entity names may contain '/', the subscription and rule
// forms are recognised from the end; whatever else remains is an entity
// path, validated by the broker. (http.ServeMux patterns cannot do this:
// they match case-sensitively and only allow a multi-segment wildcard at
// the end.)
func parseResource(path string) (resource, error) {
	if path == "" {
		return resource{}, badRequest("The request names no resource: use /$namespaceinfo, /$Resources/Queues, /$Resources/Topics or /{queue or topic}.")
	}
	segs := strings.Split(path, "/")
	if r, ok, err := parseDollarResource(path, segs); ok {
		return r, err
	}
	return parseEntityResource(path, segs), nil
}

// parseDollarResource classifies the broker's own resources, whose paths
// start with a $ word; ok is false if path is none of them.
func parseDollarResource(path string, segs []string) (r resource, ok bool, err error) {
	n := len(segs)
	word := func(i int, w string) bool { return i >= 0 && strings.EqualFold(segs[i], w) }
	switch {
	case n == 1 && word(0, "$namespaceinfo"):
		return resource{kind: resNamespaceInfo}, true, nil
	case n == 1 && word(0, "$faults"):
		return resource{kind: resFaults}, true, nil
	case n == 2 && word(0, "$faults"):
		return resource{kind: resFault, entity: segs[1]}, true, nil
	case word(0, "$namespaces"), word(0, "$time"):
		return parseControlResource(segs)
	case n == 2 && word(0, "$rules") && word(1, "dry-run"):
		return resource{kind: resDryRun}, true, nil
	case word(0, "$history"):
		// The entity may hold '/' (a subscription's path): the forms are
		// recognised from the end.
		switch {
		case n >= 4 && word(n-2, "messages"):
			return resource{kind: resHistory, entity: strings.Join(segs[1:n-2], "/"), seq: segs[n-1]}, true, nil
		case n >= 3 && word(n-1, "messages"):
			return resource{kind: resHistory, entity: strings.Join(segs[1:n-1], "/")}, true, nil
		}
		return resource{}, true, badRequest("'%s' is not a history: use /$history/{entity}/messages/{sequence number} or /$history/{entity}/messages?message-id={id}.", path)
	case n == 2 && word(0, "$Resources"):
		switch {
		case word(1, "Queues"):
			return resource{kind: resQueues}, true, nil
		case word(1, "Topics"):
			return resource{kind: resTopics}, true, nil
		}
		return resource{}, true, badRequest("'%s' is not a resource collection: use $Resources/Queues or $Resources/Topics.", path)
	}
	return resource{}, false, nil
}

// parseControlResource classifies /$namespaces[/{name}] and
// /$time[/advance|/set]; ok is false for other paths under them.
func parseControlResource(segs []string) (r resource, ok bool, err error) {
	n := len(segs)
	word := func(i int, w string) bool { return i < n && strings.EqualFold(segs[i], w) }
	switch {
	case n == 1 && word(0, "$namespaces"):
		return resource{kind: resNamespaces}, true, nil
	case n == 2 && word(0, "$namespaces"):
		return resource{kind: resNamespace, entity: segs[1]}, true, nil
	case n == 1 && word(0, "$time"):
		return resource{kind: resTime}, true, nil
	case n == 2 && word(1, "advance"):
		return resource{kind: resTimeAdvance}, true, nil
	case n == 2 && word(1, "set"):
		return resource{kind: resTimeSet}, true, nil
	}
	return resource{}, false, nil
}

// parseEntityResource classifies an entity path and what under it path
// names, recognising the subscription and rule forms from the end.
func parseEntityResource(path string, segs []string) resource {
	n := len(segs)
	word := func(i int, w string) bool { return i >= 0 && strings.EqualFold(segs[i], w) }
	join := func(k int) string { return strings.Join(segs[:k], "/") }
	switch {
	case n >= 5 && word(n-4, "Subscriptions") && word(n-2, "Rules"):
		return resource{kind: resRule, entity: join(n - 4), subscription: segs[n-3], rule: segs[n-1]}
	case n >= 4 && word(n-3, "Subscriptions") && word(n-1, "Rules"):
		return resource{kind: resRules, entity: join(n - 3), subscription: segs[n-2]}
	case n >= 3 && word(n-2, "Subscriptions"):
		return resource{kind: resSubscription, entity: join(n - 2), subscription: segs[n-1]}
	case n >= 2 && word(n-1, "Subscriptions"):
		return resource{kind: resSubscriptions, entity: join(n - 1)}
	}
	return resource{kind: resEntity, entity: path}
}

// endpoint serves one method on one kind of resource.
type endpoint func(h *Handler, rq *request) (*reply, error)

// routes maps each kind of resource and method to its endpoint.
var routes = map[resourceKind]map[string]endpoint{
	resNamespaceInfo: {http.MethodGet: getNamespaceInfo},
	resQueues:        {http.MethodGet: listQueues},
	resTopics:        {http.MethodGet: listTopics},
	resEntity:        {http.MethodGet: getEntity, http.MethodPut: putEntity, http.MethodDelete: deleteEntity},
	resSubscriptions: {http.MethodGet: listSubscriptions},
	resSubscription:  {http.MethodGet: getSubscription, http.MethodPut: putSubscription, http.MethodDelete: deleteSubscription},
	resRules:         {http.MethodGet: listRules, http.MethodPut: putRule},
	resRule:          {http.MethodGet: getRule, http.MethodPut: putRule, http.MethodDelete: deleteRule},
	resFaults:        {http.MethodGet: listFaults, http.MethodPost: addFault, http.MethodDelete: clearFaults},
	resFault:         {http.MethodDelete: clearFaults},
	resDryRun:        {http.MethodPost: dryRun},
	resTime:          {http.MethodGet: getTime},
	resTimeAdvance:   {http.MethodPost: advanceTime},
	resTimeSet:       {http.MethodPost: setTime},
	resHistory:       {http.MethodGet: getHistory},
	resNamespaces:    {http.MethodGet: listNamespaces},
	resNamespace:     {http.MethodDelete: deleteNamespace},
}

// methodNotAllowed is the 405 for a method a resource does not serve.
func methodNotAllowed(method, path string, methods map[string]endpoint) *Error {
	allow := make([]string, 0, len(methods))
	for m := range methods {
		allow = append(allow, m)
	}
	slices.Sort(allow)
	e := errorf(http.StatusMethodNotAllowed, "The method %s is not allowed on '/%s'; use %s.", method, path, strings.Join(allow, ", "))
	e.Allow = strings.Join(allow, ", ")
	return e
}
