// Command busbar-bench measures Busbar against RabbitMQ and NATS
// JetStream on one machine: workloads W1–W5 of docs/benchmarks.md.
//
//	cd bench && go run ./cmd/busbar-bench                      # Busbar only
//	cd bench && go run ./cmd/busbar-bench -rabbitmq-sbin DIR -nats-server BIN -out results
//
// bench/peers.sh installs the peers and runs the whole comparison.
package main

import (
	"os"

	"github.com/busbarmq/busbar/bench"
)

func main() {
	os.Exit(bench.Main(os.Args[1:], os.Stdout, os.Stderr))
}
