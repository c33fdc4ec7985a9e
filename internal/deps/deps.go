package deps

import (
	_ "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	_ "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	_ "github.com/Azure/go-amqp"
	_ "github.com/google/uuid"
	_ "github.com/spf13/cobra"
	_ "go.uber.org/goleak"
)
