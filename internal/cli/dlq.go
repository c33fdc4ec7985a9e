package cli

import (
	"github.com/spf13/cobra"
)

func newDLQCmd(a *app) *cobra.Command {
	return groupCmd("dlq", "Work with dead-letter queues",
		`Work with a queue's dead-letter queue. To look at dead-lettered messages use
'busbar peek QUEUE --dlq'; to drop them, 'busbar purge QUEUE --dlq'.`,
		newDLQResubmitCmd(a),
	)
}
