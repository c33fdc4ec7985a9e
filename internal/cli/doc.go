// Package cli is Busbar's operator command line: the commands of the busbar
// binary that talk to a running broker, as opposed to `busbar serve`, which
// runs one.
//
//	busbar queue create|list|show|update|delete          entities, over the management (ATOM) API
//	busbar topic create|list|show|update|delete
//	busbar subscription create|list|show|update|delete   TOPIC NAME
//	busbar rule create|list|show|update|delete           TOPIC SUBSCRIPTION NAME
//	busbar send QUEUE|TOPIC                               send one message, or many with --jsonl
//	busbar peek ENTITY                                    browse without locking
//	busbar receive ENTITY                                 receive and settle
//	busbar dlq resubmit ENTITY                            move dead-lettered messages back (or on)
//	busbar purge ENTITY                                   delete every available message
//	busbar session list|show|set-state ENTITY [SESSION]  sessions of a session-enabled entity
//	busbar export                                         the topology as an emulator Config.json
//	busbar import TEMPLATE.json [-o FILE | --apply]       an Azure ARM template's entities as Config.json, or created
//	busbar namespace list|delete [NAME]                  the broker's namespaces; delete one made for a key name
//
// # Queues and subscriptions
//
// The commands that read messages (peek, receive, purge, dlq resubmit) take
// an ENTITY: a queue name, or a topic name with --subscription (-s) naming
// one of its subscriptions. The subscription's entity path,
// TOPIC/Subscriptions/SUB, is accepted as the argument too, as it is what
// the commands print. --dlq and --transfer-dlq select the entity's
// dead-letter queues. send takes a queue or a topic: a subscription is never
// sent to directly.
//
// dlq resubmit sends a queue's dead letters back to the queue by default. A
// subscription's have no such home: sending them to the topic would deliver
// them again to every subscription whose rules match, not just the one they
// came from. So for a subscription --to is required: --to TOPIC does what
// Service Bus Explorer does, knowingly; --to QUEUE moves them to a queue of
// the operator's choosing (a retry queue, say).
//
// Create commands take --if-not-exists: an entity that is already there is
// left as it is (nothing is compared) and the command exits 0 saying so. A
// queue's name held by a topic, or the reverse, is still "already exists".
//
// # Sessions
//
// A session-enabled queue or subscription cannot be read without naming a
// session: the broker refuses a plain receiver (amqp:not-allowed, "requires
// sessions"). peek, receive and purge take --session-id and then use an SDK
// session receiver, which locks the session for the command's duration.
// Without --session-id, on the broker's refusal: peek fails with a usage
// error naming the flag and up to five sessions with messages (the SDK
// cannot peek across sessions); receive accepts the next session with an
// available message and says which; purge accepts sessions one after the
// other (AcceptNextSession) until none is offered for --wait. Dead-letter
// queues have no sessions, so --session-id with --dlq is a usage error.
//
// session list needs the management operation
// com.microsoft:get-message-sessions, which the Go SDK does not expose;
// mgmtClient speaks it with go-amqp (see amqpmgmt.go for the exchange).
// session show and set-state lock the session with a session receiver,
// as the broker, like Service Bus, answers session-state requests only for
// a session someone holds.
//
// Queues and topics share one name space and one management URL; queue
// commands refuse a topic's name and topic commands a queue's, rather than
// reading an empty description or deleting the other kind.
//
// # Export
//
// export writes queues, topics, subscriptions and rules as a Config.json
// that busbar serve --config loads back to the same topology, which exports
// to the same bytes again. A subscription's first rule becomes its default
// rule when the file is loaded, and one declared without rules gets
// $Default (a TrueFilter): so a subscription whose only rule is that
// $Default is written without rules, any other is written with all of its
// rules in the broker's order. Config.json has SQL and correlation filters
// only, so TrueFilter and FalseFilter are written as the SQL filters 1=1
// and 1=0 (and come back as such). What the file cannot hold (a
// subscription without rules, SQL parameters, correlation properties that
// are not strings, numbers or booleans) stops the export with an error
// listing every case.
//
// Nothing is written until the whole topology has been read and encoded.
// export -o FILE writes a temporary file in FILE's directory, syncs it and
// renames it over FILE (writeFileAtomic), so FILE is never empty or partly
// written; a file already there keeps its permissions.
//
// # Go admin client workarounds
//
// The Go admin client (azservicebus/admin v1.11.0) does not send a
// subscription's Status; the admin transport adds it (see
// withSubscriptionStatus). It writes every integer rule value as a 32-bit
// int and every double with six decimals, so rule commands refuse values it
// would change. It cannot read xsd:long values, which rule list, show and
// export report as such.
//
// The commands are clients of the broker and use nothing but its public
// interfaces, through the official Go SDK: azservicebus for messaging (AMQP)
// and azservicebus/admin for entities (ATOM over HTTP). What works here works
// against Azure Service Bus too, given its connection string.
//
// # Connecting
//
// The connection string comes from --connection-string, else the
// BUSBAR_CONNECTION_STRING environment variable, else the emulator's
// well-known one (DefaultConnectionString). The management API is reached on
// --admin ADDR, else BUSBAR_ADMIN, else, for a connection string with
// UseDevelopmentEmulator=true, on plain HTTP at the endpoint's host and port
// 5300, provided the endpoint's AMQP port is 5672 (given or implied).
// Another AMQP port says nothing about the HTTP port, which busbar serve
// sets separately, so without --admin that is a usage error asking for it
// rather than a guess. The Go admin client always speaks https to the endpoint host, so the
// commands give it a transport that rewrites each request's scheme and host
// (adminTransport). Without UseDevelopmentEmulator and without --admin, the
// admin client is left alone and speaks https to the endpoint, as it does
// with Azure.
//
// --namespace NAME works in one namespace of a broker serving several: the
// connection string's endpoint becomes NAME.localhost (its port kept), so
// tokens are signed for it, AMQP open names it and admin requests carry it
// as their Host header, while connections still go to the connection
// string's own address (and the admin address derived from it).
//
// # Output
//
// Every command prints a human-readable table by default and JSON with
// --json. Messages have one JSON form (jsonMessage) for peek and receive
// output and for send --jsonl input, so that
//
//	busbar peek q --json | jq -c '.[]' | busbar send other --jsonl -
//
// copies messages between queues (or from a subscription to a topic).
//
// # Exit codes
//
//	0  success
//	1  failure (connection refused, rejected operation, partial failure)
//	2  usage error: unknown flag, bad flag value, wrong number of arguments,
//	   --session-id missing for an entity that requires sessions (peek) or
//	   given for one without them
//	3  not found: the queue, topic, subscription or rule does not exist
//	4  access denied: wrong key or missing rights
//	5  already exists: create on an existing name
//
// ExitCode maps an error returned by one of these commands to its code;
// the binary's main function calls it. TestExitCodesPerCommand checks each
// code for every command.
package cli
