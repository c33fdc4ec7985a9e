package frames

import (
	"fmt"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
)

// Aliases of the encoding types used in field declarations, so that users
// of this package rarely need to import encoding.
type (
	Symbol    = encoding.Symbol
	UUID      = encoding.UUID
	Char      = encoding.Char
	Described = encoding.Described
	Map       = encoding.Map
)

// Ptr returns a pointer to v, for optional fields.
func Ptr[T any](v T) *T { return &v }

// Descriptor codes of the composite types (domain 0x00000000).
const (
	// Transport performatives (part 2 section 2.7).
	DescriptorOpen        uint64 = 0x10
	DescriptorBegin       uint64 = 0x11
	DescriptorAttach      uint64 = 0x12
	DescriptorFlow        uint64 = 0x13
	DescriptorTransfer    uint64 = 0x14
	DescriptorDisposition uint64 = 0x15
	DescriptorDetach      uint64 = 0x16
	DescriptorEnd         uint64 = 0x17
	DescriptorClose       uint64 = 0x18

	// Error (part 2 section 2.8.14).
	DescriptorError uint64 = 0x1d

	// Delivery states (part 3 section 3.4).
	DescriptorReceived uint64 = 0x23
	DescriptorAccepted uint64 = 0x24
	DescriptorRejected uint64 = 0x25
	DescriptorReleased uint64 = 0x26
	DescriptorModified uint64 = 0x27

	// Terminus types (part 3 section 3.5).
	DescriptorSource uint64 = 0x28
	DescriptorTarget uint64 = 0x29

	// Lifetime policies for dynamic nodes (part 3 section 3.5.10).
	DescriptorDeleteOnClose             uint64 = 0x2b
	DescriptorDeleteOnNoLinks           uint64 = 0x2c
	DescriptorDeleteOnNoMessages        uint64 = 0x2d
	DescriptorDeleteOnNoLinksOrMessages uint64 = 0x2e

	// Transactions (part 4).
	DescriptorCoordinator        uint64 = 0x30
	DescriptorDeclare            uint64 = 0x31
	DescriptorDischarge          uint64 = 0x32
	DescriptorDeclared           uint64 = 0x33
	DescriptorTransactionalState uint64 = 0x34

	// SASL (part 5 section 5.3.3).
	DescriptorSASLMechanisms uint64 = 0x40
	DescriptorSASLInit       uint64 = 0x41
	DescriptorSASLChallenge  uint64 = 0x42
	DescriptorSASLResponse   uint64 = 0x43
	DescriptorSASLOutcome    uint64 = 0x44

	// Message sections (part 3 section 3.2).
	DescriptorHeader                uint64 = 0x70
	DescriptorDeliveryAnnotations   uint64 = 0x71
	DescriptorMessageAnnotations    uint64 = 0x72
	DescriptorProperties            uint64 = 0x73
	DescriptorApplicationProperties uint64 = 0x74
	DescriptorData                  uint64 = 0x75
	DescriptorAMQPSequence          uint64 = 0x76
	DescriptorAMQPValue             uint64 = 0x77
	DescriptorFooter                uint64 = 0x78
)

// symbolicDescriptors maps the symbolic descriptor names of the spec to
// their codes. Peers may use either form.
var symbolicDescriptors = map[Symbol]uint64{
	"amqp:open:list":                           DescriptorOpen,
	"amqp:begin:list":                          DescriptorBegin,
	"amqp:attach:list":                         DescriptorAttach,
	"amqp:flow:list":                           DescriptorFlow,
	"amqp:transfer:list":                       DescriptorTransfer,
	"amqp:disposition:list":                    DescriptorDisposition,
	"amqp:detach:list":                         DescriptorDetach,
	"amqp:end:list":                            DescriptorEnd,
	"amqp:close:list":                          DescriptorClose,
	"amqp:error:list":                          DescriptorError,
	"amqp:received:list":                       DescriptorReceived,
	"amqp:accepted:list":                       DescriptorAccepted,
	"amqp:rejected:list":                       DescriptorRejected,
	"amqp:released:list":                       DescriptorReleased,
	"amqp:modified:list":                       DescriptorModified,
	"amqp:source:list":                         DescriptorSource,
	"amqp:target:list":                         DescriptorTarget,
	"amqp:delete-on-close:list":                DescriptorDeleteOnClose,
	"amqp:delete-on-no-links:list":             DescriptorDeleteOnNoLinks,
	"amqp:delete-on-no-messages:list":          DescriptorDeleteOnNoMessages,
	"amqp:delete-on-no-links-or-messages:list": DescriptorDeleteOnNoLinksOrMessages,
	"amqp:coordinator:list":                    DescriptorCoordinator,
	"amqp:declare:list":                        DescriptorDeclare,
	"amqp:discharge:list":                      DescriptorDischarge,
	"amqp:declared:list":                       DescriptorDeclared,
	"amqp:transactional-state:list":            DescriptorTransactionalState,
	"amqp:sasl-mechanisms:list":                DescriptorSASLMechanisms,
	"amqp:sasl-init:list":                      DescriptorSASLInit,
	"amqp:sasl-challenge:list":                 DescriptorSASLChallenge,
	"amqp:sasl-response:list":                  DescriptorSASLResponse,
	"amqp:sasl-outcome:list":                   DescriptorSASLOutcome,
	"amqp:header:list":                         DescriptorHeader,
	"amqp:delivery-annotations:map":            DescriptorDeliveryAnnotations,
	"amqp:message-annotations:map":             DescriptorMessageAnnotations,
	"amqp:properties:list":                     DescriptorProperties,
	"amqp:application-properties:map":          DescriptorApplicationProperties,
	"amqp:data:binary":                         DescriptorData,
	"amqp:amqp-sequence:list":                  DescriptorAMQPSequence,
	"amqp:amqp-value:*":                        DescriptorAMQPValue,
	"amqp:footer:map":                          DescriptorFooter,
}

// symbolicDescriptor returns the code for a symbolic descriptor, or a
// value that matches no known code.
func symbolicDescriptor(name Symbol) uint64 {
	if c, ok := symbolicDescriptors[name]; ok {
		return c
	}
	return ^uint64(0)
}

// Body is a frame body: one of the performatives *Open, *Begin, *Attach,
// *Flow, *Transfer, *Disposition, *Detach, *End, *Close, *SASLMechanisms,
// *SASLInit, *SASLChallenge, *SASLResponse or *SASLOutcome.
type Body interface {
	encoding.Marshaler
	encoding.Unmarshaler
	fmt.Stringer
	frameBody()
}

// Role of a link endpoint (part 2 section 2.8.1), sent as a boolean.
type Role bool

// Roles.
const (
	RoleSender   Role = false
	RoleReceiver Role = true
)

func (r Role) String() string {
	if r == RoleReceiver {
		return "receiver"
	}
	return "sender"
}

// SenderSettleMode is the settlement policy for a sender (part 2 section
// 2.8.2), sent as a ubyte.
type SenderSettleMode uint8

// Sender settle modes.
const (
	// SenderSettleModeUnsettled: the sender will send all deliveries
	// initially unsettled to the receiver.
	SenderSettleModeUnsettled SenderSettleMode = 0
	// SenderSettleModeSettled: the sender will send all deliveries settled
	// to the receiver.
	SenderSettleModeSettled SenderSettleMode = 1
	// SenderSettleModeMixed: the sender MAY send a mixture of settled and
	// unsettled deliveries to the receiver. The default.
	SenderSettleModeMixed SenderSettleMode = 2
)

func (m SenderSettleMode) String() string {
	switch m {
	case SenderSettleModeUnsettled:
		return "unsettled"
	case SenderSettleModeSettled:
		return "settled"
	case SenderSettleModeMixed:
		return "mixed"
	}
	return fmt.Sprintf("SenderSettleMode(%d)", uint8(m))
}

// ReceiverSettleMode is the settlement policy for a receiver (part 2
// section 2.8.3), sent as a ubyte.
type ReceiverSettleMode uint8

// Receiver settle modes.
const (
	// ReceiverSettleModeFirst: the receiver will spontaneously settle all
	// incoming transfers. The default.
	ReceiverSettleModeFirst ReceiverSettleMode = 0
	// ReceiverSettleModeSecond: the receiver will only settle after
	// sending the disposition to the sender and receiving a disposition
	// indicating settlement of the delivery from the sender.
	ReceiverSettleModeSecond ReceiverSettleMode = 1
)

func (m ReceiverSettleMode) String() string {
	switch m {
	case ReceiverSettleModeFirst:
		return "first"
	case ReceiverSettleModeSecond:
		return "second"
	}
	return fmt.Sprintf("ReceiverSettleMode(%d)", uint8(m))
}

// TerminusDurability says what state of a terminus is retained durably
// (part 3 section 3.5.5), sent as a uint.
type TerminusDurability uint32

// Terminus durabilities.
const (
	// DurabilityNone: no terminus state is retained durably. The default.
	DurabilityNone TerminusDurability = 0
	// DurabilityConfiguration: only the existence and configuration of
	// the terminus is retained durably.
	DurabilityConfiguration TerminusDurability = 1
	// DurabilityUnsettledState: in addition to the existence and
	// configuration of the terminus, the unsettled state for durable
	// messages is retained durably.
	DurabilityUnsettledState TerminusDurability = 2
)

// TerminusExpiryPolicy says when the expiry timer of a terminus starts
// counting down (part 3 section 3.5.6).
type TerminusExpiryPolicy = Symbol

// Terminus expiry policies.
const (
	ExpiryLinkDetach      TerminusExpiryPolicy = "link-detach"
	ExpirySessionEnd      TerminusExpiryPolicy = "session-end" // the default
	ExpiryConnectionClose TerminusExpiryPolicy = "connection-close"
	ExpiryNever           TerminusExpiryPolicy = "never"
)

// Standard distribution modes (part 3 section 3.5.7).
const (
	DistributionModeMove Symbol = "move"
	DistributionModeCopy Symbol = "copy"
)

// SASLCode is the outcome code of a SASL exchange (part 5 section 5.3.3.6),
// sent as a ubyte.
type SASLCode uint8

// SASL outcome codes.
const (
	// SASLCodeOK: connection authentication succeeded.
	SASLCodeOK SASLCode = 0
	// SASLCodeAuth: connection authentication failed due to an
	// unspecified problem with the supplied credentials.
	SASLCodeAuth SASLCode = 1
	// SASLCodeSys: connection authentication failed due to a system error.
	SASLCodeSys SASLCode = 2
	// SASLCodeSysPerm: connection authentication failed due to a system
	// error that is unlikely to be corrected without intervention.
	SASLCodeSysPerm SASLCode = 3
	// SASLCodeSysTemp: connection authentication failed due to a transient
	// system error.
	SASLCodeSysTemp SASLCode = 4
)

// Error conditions of the spec (part 2 section 2.8.15 to 2.8.18).
const (
	// amqp-error
	ErrCondInternalError         Symbol = "amqp:internal-error"
	ErrCondNotFound              Symbol = "amqp:not-found"
	ErrCondUnauthorizedAccess    Symbol = "amqp:unauthorized-access"
	ErrCondDecodeError           Symbol = "amqp:decode-error"
	ErrCondResourceLimitExceeded Symbol = "amqp:resource-limit-exceeded"
	ErrCondNotAllowed            Symbol = "amqp:not-allowed"
	ErrCondInvalidField          Symbol = "amqp:invalid-field"
	ErrCondNotImplemented        Symbol = "amqp:not-implemented"
	ErrCondResourceLocked        Symbol = "amqp:resource-locked"
	ErrCondPreconditionFailed    Symbol = "amqp:precondition-failed"
	ErrCondResourceDeleted       Symbol = "amqp:resource-deleted"
	ErrCondIllegalState          Symbol = "amqp:illegal-state"
	ErrCondFrameSizeTooSmall     Symbol = "amqp:frame-size-too-small"

	// connection-error
	ErrCondConnectionForced Symbol = "amqp:connection:forced"
	ErrCondFramingError     Symbol = "amqp:connection:framing-error"
	ErrCondRedirect         Symbol = "amqp:connection:redirect"

	// session-error
	ErrCondWindowViolation  Symbol = "amqp:session:window-violation"
	ErrCondErrantLink       Symbol = "amqp:session:errant-link"
	ErrCondHandleInUse      Symbol = "amqp:session:handle-in-use"
	ErrCondUnattachedHandle Symbol = "amqp:session:unattached-handle"

	// link-error
	ErrCondDetachForced          Symbol = "amqp:link:detach-forced"
	ErrCondTransferLimitExceeded Symbol = "amqp:link:transfer-limit-exceeded"
	ErrCondMessageSizeExceeded   Symbol = "amqp:link:message-size-exceeded"
	ErrCondLinkRedirect          Symbol = "amqp:link:redirect"
	ErrCondStolen                Symbol = "amqp:link:stolen"
)

// MessageFormat values carried in transfer's message-format field.
const (
	// MessageFormatAMQP is the standard AMQP message format (0).
	MessageFormatAMQP uint32 = 0
	// MessageFormatBatch is Microsoft's batch format: the body is one data
	// section per message, each holding a complete encoded message. See
	// SplitBatch.
	MessageFormatBatch uint32 = 0x80013700
)
