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
//	busbar export                                         the topology as an emulator Config.json
//	busbar import TEMPLATE.json [-o FILE | --apply]       an Azure ARM template's entities as Config.json, or created
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
// 5300. The Go admin client always speaks https to the endpoint host, so the
// commands give it a transport that rewrites each request's scheme and host
// (adminTransport). Without UseDevelopmentEmulator and without --admin, the
// admin client is left alone and speaks https to the endpoint, as it does
// with Azure.
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
//	2  usage error: unknown flag, bad flag value, wrong number of arguments
//	3  not found: the queue, topic, subscription or rule does not exist
//	4  access denied: wrong key or missing rights
//	5  already exists: create on an existing name
//
// ExitCode maps an error returned by one of these commands to its code;
// the binary's main function calls it.
package cli
