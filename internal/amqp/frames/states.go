package frames

import (
	"fmt"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
)

// Error carries details of an error (part 2 section 2.8.14). It
// implements the error interface.
//
//	<type name="error" class="composite" source="list">
//	    <descriptor name="amqp:error:list" code="0x00000000:0x0000001d"/>
//	    <field name="condition" type="symbol" requires="error-condition" mandatory="true"/>
//	    <field name="description" type="string"/>
//	    <field name="info" type="fields"/>
//	</type>
type Error struct {
	// Condition is a symbolic value indicating the error condition
	// (ErrCondNotFound, com.microsoft:message-lock-lost, ...).
	Condition Symbol

	// Description is descriptive text about the error condition. Empty
	// is absent.
	Description string

	// Info is a map carrying information about the error condition.
	// Keys are symbols by the spec, but both Service Bus SDKs send string
	// keys (DeadLetterReason, ...); they decode to Symbol keys as well.
	Info map[Symbol]any
}

func (e *Error) Error() string {
	if e.Description == "" {
		return string(e.Condition)
	}
	return string(e.Condition) + ": " + e.Description
}

func (e *Error) String() string {
	if e == nil {
		return "<nil>"
	}
	return fmt.Sprintf("Error{Condition:%s Description:%q Info:%v}", e.Condition, e.Description, e.Info)
}

// AppendAMQP appends the encoded error to dst.
func (e *Error) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	f := beginFields(&b, DescriptorError)
	f.symAlways(e.Condition)
	f.str(e.Description)
	if err := f.symMap(e.Info); err != nil {
		return b.Bytes(), err
	}
	f.end()
	return b.Bytes(), nil
}

// UnmarshalAMQP decodes an error.
func (e *Error) UnmarshalAMQP(r *encoding.Reader) error {
	c, err := beginComposite(r, DescriptorError, "error")
	if err != nil {
		return err
	}
	*e = Error{}
	var present uint32
	for i := 0; i < c.n; i++ {
		if r.ReadNull() {
			continue
		}
		present |= 1 << i
		switch i {
		case 0:
			e.Condition, err = r.ReadSymbol()
		case 1:
			e.Description, err = r.ReadString()
		case 2:
			e.Info, err = r.ReadSymbolMap()
		default:
			err = r.Skip()
		}
		if err != nil {
			return c.fieldErr(i, err)
		}
	}
	return c.finish(r, present, 1<<0)
}

// DeliveryState is the state of a delivery at a link endpoint (part 3
// section 3.4): *Received, *Accepted, *Rejected, *Released, *Modified, or
// a transaction's *TransactionalState or *Declared. The terminal states
// other than Received are outcomes.
type DeliveryState interface {
	encoding.Marshaler
	fmt.Stringer
	deliveryState()
}

// Received is the state of a partially received delivery (part 3 section
// 3.4.1).
//
//	<type name="received" class="composite" source="list" provides="delivery-state">
//	    <descriptor name="amqp:received:list" code="0x00000000:0x00000023"/>
//	    <field name="section-number" type="uint" mandatory="true"/>
//	    <field name="section-offset" type="ulong" mandatory="true"/>
//	</type>
type Received struct {
	// SectionNumber is the section of the message that has not been
	// completely received.
	SectionNumber uint32
	// SectionOffset is the first byte of that section not yet received.
	SectionOffset uint64
}

// Accepted is the outcome of a successfully processed delivery (part 3
// section 3.4.2).
//
//	<type name="accepted" class="composite" source="list" provides="delivery-state, outcome">
//	    <descriptor name="amqp:accepted:list" code="0x00000000:0x00000024"/>
//	</type>
type Accepted struct{}

// Rejected is the outcome of an invalid message that could not be
// processed (part 3 section 3.4.3). Service Bus uses it for dead-lettering
// (com.microsoft:dead-letter) and lock loss.
//
//	<type name="rejected" class="composite" source="list" provides="delivery-state, outcome">
//	    <descriptor name="amqp:rejected:list" code="0x00000000:0x00000025"/>
//	    <field name="error" type="error"/>
//	</type>
type Rejected struct {
	// Error is diagnostic information about the cause of the rejection.
	Error *Error
}

// Released is the outcome of a delivery that was not and will not be
// acted upon (part 3 section 3.4.4). Service Bus does not count it as a
// delivery attempt.
//
//	<type name="released" class="composite" source="list" provides="delivery-state, outcome">
//	    <descriptor name="amqp:released:list" code="0x00000000:0x00000026"/>
//	</type>
type Released struct{}

// Modified is the outcome of a delivery that was not processed and whose
// message should be modified (part 3 section 3.4.5). Service Bus abandon
// and defer arrive as modified.
//
//	<type name="modified" class="composite" source="list" provides="delivery-state, outcome">
//	    <descriptor name="amqp:modified:list" code="0x00000000:0x00000027"/>
//	    <field name="delivery-failed" type="boolean"/>
//	    <field name="undeliverable-here" type="boolean"/>
//	    <field name="message-annotations" type="fields"/>
//	</type>
type Modified struct {
	// DeliveryFailed counts the transfer as an unsuccessful delivery
	// attempt (the delivery-count is incremented).
	DeliveryFailed bool
	// UndeliverableHere says the message must not be redelivered to the
	// same link endpoint.
	UndeliverableHere bool
	// MessageAnnotations are to be merged with the message's existing
	// annotations (Service Bus: properties to modify).
	MessageAnnotations map[Symbol]any
}

// TransactionalState is the state of a delivery within a transaction
// (part 4 section 4.5.5): on a transfer or a disposition inside a
// transaction, and on the broker's answer with the provisional outcome.
//
//	<type name="transactional-state" class="composite" source="list" provides="delivery-state">
//	    <descriptor name="amqp:transactional-state:list" code="0x00000000:0x00000034"/>
//	    <field name="txn-id" type="*" mandatory="true" requires="txn-id"/>
//	    <field name="outcome" type="*" requires="outcome"/>
//	</type>
type TransactionalState struct {
	// TxnID identifies the transaction.
	TxnID []byte
	// Outcome is the provisional outcome within the transaction.
	Outcome DeliveryState
}

// Declared is the outcome of a transaction declare (part 4 section
// 4.5.3).
//
//	<type name="declared" class="composite" source="list" provides="delivery-state, outcome">
//	    <descriptor name="amqp:declared:list" code="0x00000000:0x00000033"/>
//	    <field name="txn-id" type="*" mandatory="true" requires="txn-id"/>
//	</type>
type Declared struct {
	// TxnID is the id of the declared transaction.
	TxnID []byte
}

func (*Received) deliveryState()           {}
func (*Accepted) deliveryState()           {}
func (*Rejected) deliveryState()           {}
func (*Released) deliveryState()           {}
func (*Modified) deliveryState()           {}
func (*TransactionalState) deliveryState() {}
func (*Declared) deliveryState()           {}

func (s *Received) String() string { return fmt.Sprintf("Received%+v", *s) }
func (*Accepted) String() string   { return "Accepted" }
func (s *Rejected) String() string { return fmt.Sprintf("Rejected{Error:%v}", s.Error) }
func (*Released) String() string   { return "Released" }
func (s *Modified) String() string { return fmt.Sprintf("Modified%+v", *s) }
func (s *TransactionalState) String() string {
	return fmt.Sprintf("TransactionalState{TxnID:%x Outcome:%v}", s.TxnID, s.Outcome)
}
func (s *Declared) String() string { return fmt.Sprintf("Declared{TxnID:%x}", s.TxnID) }

// AppendAMQP appends the encoded state to dst.
func (s *Received) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	f := beginFields(&b, DescriptorReceived)
	f.uint(s.SectionNumber)
	f.ulong(s.SectionOffset)
	f.end()
	return b.Bytes(), nil
}

// AppendAMQP appends the encoded outcome to dst.
func (*Accepted) AppendAMQP(dst []byte) ([]byte, error) {
	return append(dst, 0x00, encoding.TypeCodeSmallUlong, byte(DescriptorAccepted), encoding.TypeCodeList0), nil
}

// AppendAMQP appends the encoded outcome to dst.
func (s *Rejected) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	err := marshalErrorOnly(&b, DescriptorRejected, s.Error)
	return b.Bytes(), err
}

// AppendAMQP appends the encoded outcome to dst.
func (*Released) AppendAMQP(dst []byte) ([]byte, error) {
	return append(dst, 0x00, encoding.TypeCodeSmallUlong, byte(DescriptorReleased), encoding.TypeCodeList0), nil
}

// AppendAMQP appends the encoded outcome to dst.
func (s *Modified) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	f := beginFields(&b, DescriptorModified)
	f.boolOmitFalse(s.DeliveryFailed)
	f.boolOmitFalse(s.UndeliverableHere)
	if err := f.symMap(s.MessageAnnotations); err != nil {
		return b.Bytes(), err
	}
	f.end()
	return b.Bytes(), nil
}

// AppendAMQP appends the encoded state to dst.
func (s *TransactionalState) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	f := beginFields(&b, DescriptorTransactionalState)
	b.WriteBinary(s.TxnID)
	f.l.Next()
	if err := f.state(s.Outcome); err != nil {
		return b.Bytes(), err
	}
	f.end()
	return b.Bytes(), nil
}

// AppendAMQP appends the encoded outcome to dst.
func (s *Declared) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	f := beginFields(&b, DescriptorDeclared)
	b.WriteBinary(s.TxnID)
	f.l.Next()
	f.end()
	return b.Bytes(), nil
}

// state writes a delivery-state field, or an absent field for nil.
func (f *fields) state(s DeliveryState) error {
	if s == nil {
		f.l.Null()
		return nil
	}
	// Concrete cases keep the common outcomes free of interface calls.
	switch s := s.(type) {
	case *Accepted:
		f.b.WriteDescriptor(DescriptorAccepted)
		f.b.WriteRaw([]byte{encoding.TypeCodeList0})
		f.l.Next()
		return nil
	case *Released:
		f.b.WriteDescriptor(DescriptorReleased)
		f.b.WriteRaw([]byte{encoding.TypeCodeList0})
		f.l.Next()
		return nil
	default:
		return f.value(s, false)
	}
}

// ReadDeliveryState decodes a delivery state or outcome; null decodes as
// nil.
func ReadDeliveryState(r *encoding.Reader) (DeliveryState, error) {
	if r.ReadNull() {
		return nil, nil
	}
	return readDeliveryState(r)
}

// readDeliveryState reads a described delivery state: received, accepted,
// rejected, released, modified, or the transactional and declared
// states. Long on purpose: one case per state, each reading that
// state's fields in the order the specification lists them.
func readDeliveryState(r *encoding.Reader) (DeliveryState, error) {
	code, name, err := r.PeekDescriptor()
	if err != nil {
		return nil, err
	}
	if name != "" {
		code = symbolicDescriptor(name)
	}
	switch code {
	case DescriptorReceived:
		c, err := beginComposite(r, code, "received")
		if err != nil {
			return nil, err
		}
		s := new(Received)
		var present uint32
		for i := 0; i < c.n; i++ {
			if r.ReadNull() {
				continue
			}
			present |= 1 << i
			switch i {
			case 0:
				s.SectionNumber, err = r.ReadUint32()
			case 1:
				s.SectionOffset, err = r.ReadUint64()
			default:
				err = r.Skip()
			}
			if err != nil {
				return nil, c.fieldErr(i, err)
			}
		}
		return s, c.finish(r, present, 1<<0|1<<1)
	case DescriptorAccepted:
		return &Accepted{}, skipComposite(r, code, "accepted")
	case DescriptorReleased:
		return &Released{}, skipComposite(r, code, "released")
	case DescriptorRejected:
		e, err := unmarshalErrorOnly(r, code, "rejected")
		return &Rejected{Error: e}, err
	case DescriptorModified:
		c, err := beginComposite(r, code, "modified")
		if err != nil {
			return nil, err
		}
		s := new(Modified)
		for i := 0; i < c.n; i++ {
			if r.ReadNull() {
				continue
			}
			switch i {
			case 0:
				s.DeliveryFailed, err = r.ReadBool()
			case 1:
				s.UndeliverableHere, err = r.ReadBool()
			case 2:
				s.MessageAnnotations, err = r.ReadSymbolMap()
			default:
				err = r.Skip()
			}
			if err != nil {
				return nil, c.fieldErr(i, err)
			}
		}
		return s, c.finish(r, 0, 0)
	case DescriptorTransactionalState:
		c, err := beginComposite(r, code, "transactional-state")
		if err != nil {
			return nil, err
		}
		s := new(TransactionalState)
		var present uint32
		for i := 0; i < c.n; i++ {
			if r.ReadNull() {
				continue
			}
			present |= 1 << i
			switch i {
			case 0:
				s.TxnID, err = r.ReadBinary()
			case 1:
				s.Outcome, err = readDeliveryState(r)
			default:
				err = r.Skip()
			}
			if err != nil {
				return nil, c.fieldErr(i, err)
			}
		}
		return s, c.finish(r, present, 1<<0)
	case DescriptorDeclared:
		c, err := beginComposite(r, code, "declared")
		if err != nil {
			return nil, err
		}
		s := new(Declared)
		var present uint32
		for i := 0; i < c.n; i++ {
			if r.ReadNull() {
				continue
			}
			present |= 1 << i
			if i == 0 {
				s.TxnID, err = r.ReadBinary()
			} else {
				err = r.Skip()
			}
			if err != nil {
				return nil, c.fieldErr(i, err)
			}
		}
		return s, c.finish(r, present, 1<<0)
	}
	if name != "" {
		return nil, fmt.Errorf("frames: unknown delivery state %s", name)
	}
	return nil, fmt.Errorf("frames: unknown delivery state 0x%x", code)
}

// skipComposite reads a composite whose fields this package ignores.
func skipComposite(r *encoding.Reader, code uint64, name string) error {
	c, err := beginComposite(r, code, name)
	if err != nil {
		return err
	}
	for i := 0; i < c.n; i++ {
		if err := r.Skip(); err != nil {
			return c.fieldErr(i, err)
		}
	}
	return c.finish(r, 0, 0)
}
