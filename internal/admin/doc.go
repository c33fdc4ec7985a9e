// Package admin is Busbar's Service Bus management plane: the ATOM/XML REST
// API that every SDK's administration client (Go azservicebus/admin, JS and
// .NET ServiceBusAdministrationClient, Java) speaks, served over HTTP by a
// Handler on top of package broker.
//
// The wire contract is docs/wire/management-plane.md; section
// numbers in comments (§1.5 and so on) refer to it.
//
// # URL space
//
// Paths are relative to the namespace root. Path words are matched
// case-insensitively, from the end, after percent-decoding; queue and topic
// names may contain '/'. A "." or ".." segment is never resolved: it is part
// of a name, which only entities from before the naming rule (package
// names) can have; new ones are refused with 400. A trailing '/' (JS lists)
// is ignored:
//
//	/$namespaceinfo                             GET     namespace entry
//	/$Resources/Queues  ?$skip=N&$top=M         GET     feed of queues
//	/$Resources/Topics  ?$skip=N&$top=M         GET     feed of topics
//	/{entity}                                   GET     queue or topic entry with runtime counts
//	                                            PUT     create (201), or update with If-Match (200);
//	                                                    the body's QueueDescription or
//	                                                    TopicDescription says which kind
//	                                            DELETE  delete the queue or topic (200, empty body)
//	/{topic}/Subscriptions  ?$skip&$top         GET     feed of the topic's subscriptions
//	/{topic}/Subscriptions/{sub}                GET     subscription entry with runtime counts
//	                                            PUT     create (its DefaultRuleDescription, if any,
//	                                                    is its first rule instead of $Default), or
//	                                                    update with If-Match
//	                                            DELETE  delete with its rules and messages
//	/{topic}/Subscriptions/{sub}/Rules  ?…      GET     feed of the subscription's rules
//	                                            PUT     create the rule the body's <Name> names
//	                                                    (Go's CreateRule without a name)
//	/{topic}/Subscriptions/{sub}/Rules/{rule}   GET, PUT (create / If-Match update), DELETE
//
// The HTTP data plane (Service Bus's REST runtime API: send, receive,
// settle) is served by the same Handler: POST …/messages, POST and DELETE
// …/messages/head, and PUT, DELETE and POST …/messages/{seq}/{lock} are
// its requests (dataplane.go, docs/http-data-plane.md).
//
// Busbar's own endpoints, JSON in and out, under '$' names no entity can
// have (faults.go, dryrun.go, testclock.go, namespaces.go):
//
//	/$faults                                    GET list, POST add, DELETE clear the fault
//	                                            rules (404 unless fault injection is on)
//	/$faults/{id}                               DELETE  clear one rule
//	/$rules/dry-run                             POST    which subscriptions a message would reach
//	/$time                                      GET     the test clock's time (404 unless --test-clock)
//	/$time/advance, /$time/set                  POST    move the test clock forward
//	/$history/{entity}/messages/{seq}           GET     a message's history (404 unless --history)
//	/$history/{entity}/messages?message-id=ID   GET     the histories of the messages with that id
//	/$namespaces                                GET     the server's namespaces (default namespace only)
//	/$namespaces/{name}                         DELETE  delete a namespace made for a key name
//
// Queues and topics share one name space: creating either over the other
// is 409, and so is an update whose description is of the other kind.
//
// Unknown query parameters (api-version is echoed into ids, enrich and junk
// such as Go's empty "?" parameter) are ignored. Lists are ordered by name,
// 100 entries per page at most, and carry rel="self" and, while entries
// remain, rel="next" links (the JS client follows them; Go and .NET count).
//
// # Layers
//
//	ServeHTTP ── authenticate (SAS or JWT, Manage) ── parseResource ── routes[kind][method]
//	                                                                  │
//	   endpoint (getEntity, putEntity, …): decode body, call a data function,
//	   render its result as an ATOM entry or feed
//	                                                                  │
//	   data functions (Handler.GetQueue, ListQueues, …): plain Go values in
//	   and out, callable without HTTP (tests, an in-process CLI)
//
// Every failure, whether a broker error, an auth error or one found here,
// becomes an HTTP status and an <Error><Code/><Detail/></Error> body in one
// place: httpStatus in errors.go.
//
// # Cluster nodes
//
// On a cluster node (SetCluster) requests scoped to a queue or topic
// another node serves are authenticated here and forwarded to that node,
// lists merge every node's entries, and a new queue or topic is
// created by the node placement gives its id (Cluster.Place); a request
// forwarded to this node carries its principal (WithPrincipal). The
// rules, the 421 and 503 answers and the local-list format are in
// cluster.go.
//
// # XML
//
// Request bodies are read namespace-aware and order-insensitively: an
// element is known by its namespace URI and local name, never by its prefix
// (Go writes "_XMLSchema-instance:type", Java prefixes every element), and
// elements in no namespace are accepted too. Empty elements count as absent,
// and read-only or unknown elements (SizeInBytes, CountDetails,
// EntityAvailabilityStatus, …, which round-tripping clients send back) are
// ignored. An update is a full replace: what is absent reverts to its
// default (§1.9, §1.13).
//
// Responses are written by hand in the service's element order (§1.8), with
// only &, < and > escaped in text (the JS parser leaves numeric character
// references undecoded, §1.7), unset optional strings (ForwardTo,
// UserMetadata, ForwardDeadLetteredMessagesTo) omitted, the XSI prefix "i"
// and CountDetails' children under a declared "d2p1" prefix (§1.11).
//
// # Rules
//
// Filters and actions (§1.10) are known by their xsi:type, whatever its
// prefix: SqlFilter, CorrelationFilter, TrueFilter, FalseFilter;
// SqlRuleAction, EmptyRuleAction (an absent Action is none). Typed values
// (filter and action Parameters, correlation Properties) read every XML
// Schema type the SDKs send (string, int, long, double, boolean,
// dateTime, …) and .NET's duration, guid and char, each into the Go type
// of the same width (int is int32, long int64). They are written back
// with the type they hold, under a four-character prefix (d5p1, d6p1) as
// the JS client requires. A rule is written back as created: its
// SqlExpression verbatim, Parameters always (empty when none) on SQL
// filters, and an Action element always (Go and JS dereference it). The
// broker compiles filters and actions; a syntax error is a 400 naming the
// rule, the line:column and the problem.
//
// Subscription and rule entries carry no <author>; their ids spell the
// path words "Subscriptions" and "Rules" capitalised, as the JS client
// looks for them there.
package admin
