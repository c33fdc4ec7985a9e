package deps
import (
 _ "github.com/google/uuid"
 _ "go.uber.org/goleak"
 _ "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
 _ "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
 _ "github.com/Azure/go-amqp"
 _ "github.com/spf13/cobra"
)

