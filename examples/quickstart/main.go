// Command quickstart sends a message to a Busbar queue with the official
// Azure Service Bus Go SDK, receives it and completes it.
//
// Start the broker (go run ./cmd/busbar serve), create the queue
// (go run ./cmd/busbar queue create orders), then: go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

func main() {
	cs := os.Getenv("BUSBAR_CONNECTION_STRING")
	if cs == "" {
		cs = "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
	}
	if err := run(context.Background(), cs, "orders"); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, connectionString, queue string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	client, err := azservicebus.NewClientFromConnectionString(connectionString, nil)
	if err != nil {
		return err
	}
	defer client.Close(ctx)

	sender, err := client.NewSender(queue, nil)
	if err != nil {
		return err
	}
	defer sender.Close(ctx)
	err = sender.SendMessage(ctx, &azservicebus.Message{
		Body:                  []byte("hello, Busbar"),
		ApplicationProperties: map[string]any{"kind": "greeting"},
	}, nil)
	if err != nil {
		return err
	}

	receiver, err := client.NewReceiverForQueue(queue, nil) // peek-lock
	if err != nil {
		return err
	}
	defer receiver.Close(ctx)
	messages, err := receiver.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		return err
	}
	for _, m := range messages {
		fmt.Printf("received %q (sequence number %d, delivery %d)\n", m.Body, *m.SequenceNumber, m.DeliveryCount)
		if err := receiver.CompleteMessage(ctx, m, nil); err != nil {
			return err
		}
	}
	return nil
}
