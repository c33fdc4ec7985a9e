package frames

import (
	"fmt"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
)

// Flow updates link and session flow-control state (part 2 section
// 2.7.4). Without a handle it concerns only the session.
//
//	<type name="flow" class="composite" source="list" provides="frame">
//	    <descriptor name="amqp:flow:list" code="0x00000000:0x00000013"/>
//	    <field name="next-incoming-id" type="transfer-number"/>
//	    <field name="incoming-window" type="uint" mandatory="true"/>
//	    <field name="next-outgoing-id" type="transfer-number" mandatory="true"/>
//	    <field name="outgoing-window" type="uint" mandatory="true"/>
//	    <field name="handle" type="handle"/>
//	    <field name="delivery-count" type="sequence-no"/>
//	    <field name="link-credit" type="uint"/>
//	    <field name="available" type="uint"/>
//	    <field name="drain" type="boolean" default="false"/>
//	    <field name="echo" type="boolean" default="false"/>
//	    <field name="properties" type="fields"/>
//	</type>
type Flow struct {
	// NextIncomingID is the expected transfer-id of the next incoming
	// transfer; absent (nil) until the sender has received the peer's
	// begin.
	NextIncomingID *uint32

	// IncomingWindow is the sender's incoming-window.
	IncomingWindow uint32

	// NextOutgoingID is the transfer-id that will be assigned to the next
	// outgoing transfer.
	NextOutgoingID uint32

	// OutgoingWindow is the sender's outgoing-window.
	OutgoingWindow uint32

	// Handle, if set, names the link whose flow state this frame also
	// carries; nil makes this a session-only flow.
	Handle *uint32

	// DeliveryCount is the sender's delivery-count for the link; the
	// link's sender sets it, a receiver sets it to the last value it
	// knows.
	DeliveryCount *uint32

	// LinkCredit is the current maximum number of messages that can be
	// received.
	LinkCredit *uint32

	// Available is the number of available messages at the sender.
	Available *uint32

	// Drain says the sender should use up its link-credit and then
	// advance delivery-count to consume any remainder.
	Drain bool

	// Echo requests the receiver to reply with its own flow state.
	Echo bool

	// Properties are link state properties.
	Properties map[Symbol]any
}

func (*Flow) frameBody() {}

func (o *Flow) String() string {
	return fmt.Sprintf("Flow{NextIncomingID:%s IncomingWindow:%d NextOutgoingID:%d OutgoingWindow:%d Handle:%s DeliveryCount:%s LinkCredit:%s Available:%s Drain:%t Echo:%t Properties:%v}",
		ptrString(o.NextIncomingID), o.IncomingWindow, o.NextOutgoingID, o.OutgoingWindow, ptrString(o.Handle),
		ptrString(o.DeliveryCount), ptrString(o.LinkCredit), ptrString(o.Available), o.Drain, o.Echo, o.Properties)
}

// AppendAMQP appends the encoded performative to dst.
func (o *Flow) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	err := o.marshal(&b)
	return b.Bytes(), err
}

func (o *Flow) marshal(b *encoding.Buffer) error {
	f := beginFields(b, DescriptorFlow)
	f.uintPtr(o.NextIncomingID)
	f.uint(o.IncomingWindow)
	f.uint(o.NextOutgoingID)
	f.uint(o.OutgoingWindow)
	f.uintPtr(o.Handle)
	f.uintPtr(o.DeliveryCount)
	f.uintPtr(o.LinkCredit)
	f.uintPtr(o.Available)
	f.boolOmitFalse(o.Drain)
	f.boolOmitFalse(o.Echo)
	if err := f.symMap(o.Properties); err != nil {
		return err
	}
	f.end()
	return nil
}

// UnmarshalAMQP decodes a flow performative.
func (o *Flow) UnmarshalAMQP(r *encoding.Reader) error { return o.unmarshal(r, nil) }

// unmarshal decodes a flow, keeping its optional uints in slots.
func (o *Flow) unmarshal(r *encoding.Reader, slots *uintSlots) error {
	c, err := beginComposite(r, DescriptorFlow, "flow")
	if err != nil {
		return err
	}
	*o = Flow{}
	var present uint32
	for i := 0; i < c.n; i++ {
		if r.ReadNull() {
			continue
		}
		present |= 1 << i
		switch i {
		case 0:
			o.NextIncomingID, err = slots.read(r)
		case 1:
			o.IncomingWindow, err = r.ReadUint32()
		case 2:
			o.NextOutgoingID, err = r.ReadUint32()
		case 3:
			o.OutgoingWindow, err = r.ReadUint32()
		case 4:
			o.Handle, err = slots.read(r)
		case 5:
			o.DeliveryCount, err = slots.read(r)
		case 6:
			o.LinkCredit, err = slots.read(r)
		case 7:
			o.Available, err = slots.read(r)
		case 8:
			o.Drain, err = r.ReadBool()
		case 9:
			o.Echo, err = r.ReadBool()
		case 10:
			o.Properties, err = r.ReadSymbolMap()
		default:
			err = r.Skip()
		}
		if err != nil {
			return c.fieldErr(i, err)
		}
	}
	return c.finish(r, present, 1<<1|1<<2|1<<3)
}

// Transfer transfers a message, or a part of one, over a link (part 2
// section 2.7.5).
//
//	<type name="transfer" class="composite" source="list" provides="frame">
//	    <descriptor name="amqp:transfer:list" code="0x00000000:0x00000014"/>
//	    <field name="handle" type="handle" mandatory="true"/>
//	    <field name="delivery-id" type="delivery-number"/>
//	    <field name="delivery-tag" type="delivery-tag"/>
//	    <field name="message-format" type="message-format"/>
//	    <field name="settled" type="boolean"/>
//	    <field name="more" type="boolean" default="false"/>
//	    <field name="rcv-settle-mode" type="receiver-settle-mode"/>
//	    <field name="state" type="*" requires="delivery-state"/>
//	    <field name="resume" type="boolean" default="false"/>
//	    <field name="aborted" type="boolean" default="false"/>
//	    <field name="batchable" type="boolean" default="false"/>
//	</type>
type Transfer struct {
	// Handle specifies the link on which the message is transferred.
	Handle uint32

	// DeliveryID is the delivery-id assigned by the sender. It MUST be
	// set on the first transfer of a delivery and may be omitted (nil) on
	// continuation transfers.
	DeliveryID *uint32

	// DeliveryTag uniquely identifies the delivery attempt for a given
	// message on this link (at most 32 bytes). Required on the first
	// transfer of a delivery; nil is absent. Decoded tags alias the frame.
	DeliveryTag []byte

	// MessageFormat indicates the message format; set on the first
	// transfer of a delivery (MessageFormatAMQP, MessageFormatBatch).
	MessageFormat *uint32

	// Settled says the delivery is settled by the sender. Absent and
	// false are written alike.
	Settled bool

	// More says there are more transfers of this delivery to come.
	More bool

	// RcvSettleMode, if set, overrides the link's receiver settle mode
	// for this delivery (it may only be stricter).
	RcvSettleMode *ReceiverSettleMode

	// State is the sender's delivery state; nil is absent.
	State DeliveryState

	// Resume says the transfer resumes a delivery from a previous link.
	Resume bool

	// Aborted says the delivery is aborted and its transfers must be
	// discarded.
	Aborted bool

	// Batchable is a hint that the peer need not reply at once.
	Batchable bool

	// Payload is the message bytes carried by this frame: the rest of
	// the frame body after the performative. Decoded payloads alias the
	// frame buffer.
	Payload []byte

	// Buf, when ReadFrame read the frame into a pooled buffer, holds
	// Payload and DeliveryTag; see Buffer for when to Release it. Nil
	// otherwise. Not encoded.
	Buf *Buffer
}

func (*Transfer) frameBody() {}

func (o *Transfer) String() string {
	return fmt.Sprintf("Transfer{Handle:%d DeliveryID:%s DeliveryTag:%x MessageFormat:%s Settled:%t More:%t RcvSettleMode:%s State:%v Resume:%t Aborted:%t Batchable:%t Payload:%d bytes}",
		o.Handle, ptrString(o.DeliveryID), o.DeliveryTag, ptrString(o.MessageFormat), o.Settled, o.More,
		ptrString(o.RcvSettleMode), o.State, o.Resume, o.Aborted, o.Batchable, len(o.Payload))
}

// AppendAMQP appends the encoded performative to dst. The payload is not
// included; AppendFrame writes it after the performative.
func (o *Transfer) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	err := o.marshal(&b)
	return b.Bytes(), err
}

func (o *Transfer) marshal(b *encoding.Buffer) error {
	f := beginFields(b, DescriptorTransfer)
	f.uint(o.Handle)
	f.uintPtr(o.DeliveryID)
	f.binary(o.DeliveryTag)
	f.uintPtr(o.MessageFormat)
	f.boolOmitFalse(o.Settled)
	f.boolOmitFalse(o.More)
	if o.RcvSettleMode != nil {
		f.ubyte(uint8(*o.RcvSettleMode))
	} else {
		f.null()
	}
	if err := f.state(o.State); err != nil {
		return err
	}
	f.boolOmitFalse(o.Resume)
	f.boolOmitFalse(o.Aborted)
	f.boolOmitFalse(o.Batchable)
	f.end()
	return nil
}

// UnmarshalAMQP decodes a transfer performative. It leaves Payload
// untouched; ParseBody sets it.
func (o *Transfer) UnmarshalAMQP(r *encoding.Reader) error { return o.unmarshal(r, nil) }

// unmarshal decodes a transfer, keeping its optional uints in slots.
func (o *Transfer) unmarshal(r *encoding.Reader, slots *uintSlots) error {
	c, err := beginComposite(r, DescriptorTransfer, "transfer")
	if err != nil {
		return err
	}
	*o = Transfer{Payload: o.Payload}
	var present uint32
	for i := 0; i < c.n; i++ {
		if r.ReadNull() {
			continue
		}
		present |= 1 << i
		switch i {
		case 0:
			o.Handle, err = r.ReadUint32()
		case 1:
			o.DeliveryID, err = slots.read(r)
		case 2:
			o.DeliveryTag, err = r.ReadBinary()
			if err == nil && len(o.DeliveryTag) > 32 {
				err = fmt.Errorf("%w: delivery-tag of %d bytes", encoding.ErrInvalid, len(o.DeliveryTag))
			}
		case 3:
			o.MessageFormat, err = slots.read(r)
		case 4:
			o.Settled, err = r.ReadBool()
		case 5:
			o.More, err = r.ReadBool()
		case 6:
			var v uint8
			v, err = r.ReadUint8()
			if err == nil && v > uint8(ReceiverSettleModeSecond) {
				err = fmt.Errorf("%w: rcv-settle-mode %d", encoding.ErrInvalid, v)
			}
			o.RcvSettleMode = Ptr(ReceiverSettleMode(v))
		case 7:
			o.State, err = readDeliveryState(r)
		case 8:
			o.Resume, err = r.ReadBool()
		case 9:
			o.Aborted, err = r.ReadBool()
		case 10:
			o.Batchable, err = r.ReadBool()
		default:
			err = r.Skip()
		}
		if err != nil {
			return c.fieldErr(i, err)
		}
	}
	return c.finish(r, present, 1<<0)
}

// Disposition informs the peer of delivery state changes for a range of
// deliveries (part 2 section 2.7.6).
//
//	<type name="disposition" class="composite" source="list" provides="frame">
//	    <descriptor name="amqp:disposition:list" code="0x00000000:0x00000015"/>
//	    <field name="role" type="role" mandatory="true"/>
//	    <field name="first" type="delivery-number" mandatory="true"/>
//	    <field name="last" type="delivery-number"/>
//	    <field name="settled" type="boolean" default="false"/>
//	    <field name="state" type="*" requires="delivery-state"/>
//	    <field name="batchable" type="boolean" default="false"/>
//	</type>
type Disposition struct {
	// Role says whether the disposition is sent by the sender or the
	// receiver of the deliveries.
	Role Role

	// First is the lower bound of the delivery-ids of the deliveries in
	// this set.
	First uint32

	// Last is the upper bound (inclusive); nil means equal to First.
	Last *uint32

	// Settled says the deliveries are settled.
	Settled bool

	// State is the new delivery state; nil is absent.
	State DeliveryState

	// Batchable is a hint that the peer need not reply at once.
	Batchable bool
}

func (*Disposition) frameBody() {}

func (o *Disposition) String() string {
	return fmt.Sprintf("Disposition{Role:%s First:%d Last:%s Settled:%t State:%v Batchable:%t}",
		o.Role, o.First, ptrString(o.Last), o.Settled, o.State, o.Batchable)
}

// AppendAMQP appends the encoded performative to dst.
func (o *Disposition) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	err := o.marshal(&b)
	return b.Bytes(), err
}

func (o *Disposition) marshal(b *encoding.Buffer) error {
	f := beginFields(b, DescriptorDisposition)
	f.bool(bool(o.Role))
	f.uint(o.First)
	f.uintPtr(o.Last)
	f.boolOmitFalse(o.Settled)
	if err := f.state(o.State); err != nil {
		return err
	}
	f.boolOmitFalse(o.Batchable)
	f.end()
	return nil
}

// UnmarshalAMQP decodes a disposition performative.
func (o *Disposition) UnmarshalAMQP(r *encoding.Reader) error { return o.unmarshal(r, nil) }

// unmarshal decodes a disposition, keeping its optional uint in slots.
func (o *Disposition) unmarshal(r *encoding.Reader, slots *uintSlots) error {
	c, err := beginComposite(r, DescriptorDisposition, "disposition")
	if err != nil {
		return err
	}
	*o = Disposition{}
	var present uint32
	for i := 0; i < c.n; i++ {
		if r.ReadNull() {
			continue
		}
		present |= 1 << i
		switch i {
		case 0:
			var v bool
			v, err = r.ReadBool()
			o.Role = Role(v)
		case 1:
			o.First, err = r.ReadUint32()
		case 2:
			o.Last, err = slots.read(r)
		case 3:
			o.Settled, err = r.ReadBool()
		case 4:
			o.State, err = readDeliveryState(r)
		case 5:
			o.Batchable, err = r.ReadBool()
		default:
			err = r.Skip()
		}
		if err != nil {
			return c.fieldErr(i, err)
		}
	}
	return c.finish(r, present, 1<<0|1<<1)
}
