// Package cli is Busbar's operator command line: the commands of the busbar
// binary that talk to a running broker, as opposed to `busbar serve`, which
// runs one.
//
//	busbar queue create|list|show|update|delete   entities, over the management (ATOM) API
//	busbar send QUEUE                              send one message, or many with --jsonl
//	busbar peek QUEUE                              browse without locking
//	busbar receive QUEUE                           receive and settle
//	busbar dlq resubmit QUEUE                      move dead-lettered messages back
//	busbar purge QUEUE                             delete every available message
//	busbar export                                  the topology as an emulator Config.json
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
// copies messages between queues.
//
// # Exit codes
//
//	0  success
//	1  failure (connection refused, rejected operation, partial failure)
//	2  usage error: unknown flag, bad flag value, wrong number of arguments
//	3  not found: the queue does not exist
//	4  access denied: wrong key or missing rights
//	5  already exists: queue create on an existing name
//
// ExitCode maps an error returned by one of these commands to its code;
// the binary's main function calls it.
package cli
