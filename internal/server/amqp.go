package server

import (
	"context"
	"log/slog"
	"net"

	"github.com/busbarmq/busbar/internal/broker"
)

// amqpServer is the AMQP side of the server.
type amqpServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
}

// newAMQPServer builds the AMQP endpoint speaking Service Bus's dialect.
// TODO(issue 3): replace with internal/servicebus once it lands; until
// then connections are accepted and closed.
func newAMQPServer(b *broker.Broker, log *slog.Logger) (amqpServer, error) {
	return &closingServer{}, nil
}

type closingServer struct{ ln net.Listener }

func (c *closingServer) Serve(ln net.Listener) error {
	c.ln = ln
	for {
		conn, err := ln.Accept()
		if err != nil {
			return err
		}
		conn.Close()
	}
}

func (c *closingServer) Shutdown(context.Context) error {
	if c.ln != nil {
		return c.ln.Close()
	}
	return nil
}
