// Package admin is Busbar's Service Bus management plane: the ATOM/XML REST
// API that every SDK's administration client (Go azservicebus/admin, JS and
// .NET ServiceBusAdministrationClient, Java) speaks, served over HTTP by a
// Handler on top of package broker.
//
// The wire contract is /work/shared/docs/management-and-rules.md §1; section
// numbers in comments (§1.5 and so on) refer to it.
//
// # URL space
//
// Paths are relative to the namespace root. Path words are matched
// case-insensitively, from the end, after percent-decoding; queue (and topic)
// names may contain '/':
//
//	/$namespaceinfo                            GET     namespace entry
//	/$Resources/Queues   ?$skip=N&$top=M       GET     feed of queues
//	/{entity}                                  GET     queue entry with runtime counts
//	                                           PUT     create (201), or update with If-Match (200)
//	                                           DELETE  delete (200, empty body)
//
//	not served yet (501 "topics are not supported yet"), any method:
//	/$Resources/Topics
//	/{topic}/Subscriptions[/]
//	/{topic}/Subscriptions/{sub}
//	/{topic}/Subscriptions/{sub}/Rules[/]
//	/{topic}/Subscriptions/{sub}/Rules/{rule}
//	PUT /{entity} with a TopicDescription body
//
// Unknown query parameters (api-version is echoed into ids, enrich and junk
// such as Go's empty "?" parameter) are ignored. Lists are ordered by name,
// 100 entries per page at most, and carry rel="self" and, while entries
// remain, rel="next" links (the JS client follows them; Go and .NET count).
//
// # Layers
//
//	ServeHTTP ── authenticate (SAS, Manage) ── parseResource ── routes[kind][method]
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
// # Adding topics
//
// The router already tells topic, subscription and rule paths apart; each
// of those routes points at notSupported. When the broker has topics: add a
// TopicDescription field table and writer next to the queue ones
// (queuexml.go), make getEntity and deleteEntity fall back from queue to
// topic, give putEntity's "TopicDescription" case a body, and point the
// routes at real endpoints. Error mapping, envelopes, paging and auth do not
// change.
package admin
