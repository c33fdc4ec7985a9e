package frames

import (
	"fmt"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
)

// Attach attaches a link to a session (part 2 section 2.7.3).
//
//	<type name="attach" class="composite" source="list" provides="frame">
//	    <descriptor name="amqp:attach:list" code="0x00000000:0x00000012"/>
//	    <field name="name" type="string" mandatory="true"/>
//	    <field name="handle" type="handle" mandatory="true"/>
//	    <field name="role" type="role" mandatory="true"/>
//	    <field name="snd-settle-mode" type="sender-settle-mode" default="mixed"/>
//	    <field name="rcv-settle-mode" type="receiver-settle-mode" default="first"/>
//	    <field name="source" type="*" requires="source"/>
//	    <field name="target" type="*" requires="target"/>
//	    <field name="unsettled" type="map"/>
//	    <field name="incomplete-unsettled" type="boolean" default="false"/>
//	    <field name="initial-delivery-count" type="sequence-no"/>
//	    <field name="max-message-size" type="ulong"/>
//	    <field name="offered-capabilities" type="symbol" multiple="true"/>
//	    <field name="desired-capabilities" type="symbol" multiple="true"/>
//	    <field name="properties" type="fields"/>
//	</type>
type Attach struct {
	// Name uniquely identifies the link from the container of the source
	// to the container of the target node.
	Name string

	// Handle is the numeric handle assigned by the sender of this frame
	// to refer to the link on the session.
	Handle uint32

	// Role is the role being played by the peer sending this frame.
	Role Role

	// SndSettleMode is the settlement policy of the sender. nil is
	// absent (the default, mixed). A reply must echo the requester's
	// mode explicitly, so set it.
	SndSettleMode *SenderSettleMode

	// RcvSettleMode is the settlement policy of the receiver. nil is
	// absent (the default, first). A reply must echo it explicitly.
	RcvSettleMode *ReceiverSettleMode

	// Source is the source for messages; nil is a null source (used, for
	// example, in the attach reply that precedes a refusing detach).
	Source *Source

	// Target is the target for messages; nil is a null target. A
	// coordinator target decodes into Coordinator instead.
	Target *Target

	// Coordinator is set instead of Target when the peer attaches to a
	// transaction coordinator (part 4 section 4.5.1).
	Coordinator *Coordinator

	// Unsettled is the unsettled delivery state: delivery-tag ([]byte)
	// to DeliveryState (or nil). nil is absent.
	Unsettled Map

	// IncompleteUnsettled says the unsettled map is incomplete.
	IncompleteUnsettled bool

	// InitialDeliveryCount is the sender's initial value for
	// delivery-count. It MUST NOT be null if role is sender, and it is
	// ignored if the role is receiver.
	InitialDeliveryCount *uint32

	// MaxMessageSize is the largest message size the sending link
	// endpoint can send or receive. 0 is absent: no limit. A broker's
	// sender-link reply must carry a non-zero value.
	MaxMessageSize uint64

	// OfferedCapabilities are the extension capabilities the sender
	// supports.
	OfferedCapabilities []Symbol

	// DesiredCapabilities are the extension capabilities the sender may
	// use if the receiver supports them.
	DesiredCapabilities []Symbol

	// Properties are link properties (for example
	// com.microsoft:locked-until-utc).
	Properties map[Symbol]any
}

func (*Attach) frameBody() {}

func (o *Attach) String() string {
	return fmt.Sprintf("Attach{Name:%q Handle:%d Role:%s SndSettleMode:%s RcvSettleMode:%s Source:%v Target:%v Coordinator:%v Unsettled:%v IncompleteUnsettled:%t InitialDeliveryCount:%s MaxMessageSize:%d OfferedCapabilities:%v DesiredCapabilities:%v Properties:%v}",
		o.Name, o.Handle, o.Role, ptrString(o.SndSettleMode), ptrString(o.RcvSettleMode), o.Source, o.Target, o.Coordinator,
		o.Unsettled, o.IncompleteUnsettled, ptrString(o.InitialDeliveryCount), o.MaxMessageSize, o.OfferedCapabilities, o.DesiredCapabilities, o.Properties)
}

// ptrString formats an optional field.
func ptrString[T any](p *T) string {
	if p == nil {
		return "<nil>"
	}
	return fmt.Sprint(*p)
}

// AppendAMQP appends the encoded performative to dst.
func (o *Attach) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	err := o.marshal(&b)
	return b.Bytes(), err
}

func (o *Attach) marshal(b *encoding.Buffer) error {
	f := beginFields(b, DescriptorAttach)
	f.strAlways(o.Name)
	f.uint(o.Handle)
	f.bool(bool(o.Role))
	if o.SndSettleMode != nil {
		f.ubyte(uint8(*o.SndSettleMode))
	} else {
		f.null()
	}
	if o.RcvSettleMode != nil {
		f.ubyte(uint8(*o.RcvSettleMode))
	} else {
		f.null()
	}
	if err := f.value(o.Source, o.Source == nil); err != nil {
		return err
	}
	var err error
	if o.Coordinator != nil {
		err = f.value(o.Coordinator, false)
	} else {
		err = f.value(o.Target, o.Target == nil)
	}
	if err != nil {
		return err
	}
	if o.Unsettled != nil {
		if err := b.WriteMap(o.Unsettled); err != nil {
			return err
		}
		f.l.Next()
	} else {
		f.null()
	}
	f.boolOmitFalse(o.IncompleteUnsettled)
	f.uintPtr(o.InitialDeliveryCount)
	f.ulongOmitZero(o.MaxMessageSize)
	f.syms(o.OfferedCapabilities)
	f.syms(o.DesiredCapabilities)
	if err := f.symMap(o.Properties); err != nil {
		return err
	}
	f.end()
	return nil
}

// UnmarshalAMQP decodes an attach performative.
func (o *Attach) UnmarshalAMQP(r *encoding.Reader) error {
	c, err := beginComposite(r, DescriptorAttach, "attach")
	if err != nil {
		return err
	}
	*o = Attach{}
	var present uint32
	for i := 0; i < c.n; i++ {
		if r.ReadNull() {
			continue
		}
		present |= 1 << i
		switch i {
		case 0:
			o.Name, err = r.ReadString()
		case 1:
			o.Handle, err = r.ReadUint32()
		case 2:
			var v bool
			v, err = r.ReadBool()
			o.Role = Role(v)
		case 3:
			var v uint8
			v, err = r.ReadUint8()
			if err == nil && v > uint8(SenderSettleModeMixed) {
				err = fmt.Errorf("%w: snd-settle-mode %d", encoding.ErrInvalid, v)
			}
			o.SndSettleMode = Ptr(SenderSettleMode(v))
		case 4:
			var v uint8
			v, err = r.ReadUint8()
			if err == nil && v > uint8(ReceiverSettleModeSecond) {
				err = fmt.Errorf("%w: rcv-settle-mode %d", encoding.ErrInvalid, v)
			}
			o.RcvSettleMode = Ptr(ReceiverSettleMode(v))
		case 5:
			o.Source = new(Source)
			err = o.Source.UnmarshalAMQP(r)
		case 6:
			var code uint64
			var name Symbol
			code, name, err = r.PeekDescriptor()
			if name != "" {
				code = symbolicDescriptor(name)
			}
			if err == nil && code == DescriptorCoordinator {
				o.Coordinator = new(Coordinator)
				err = o.Coordinator.UnmarshalAMQP(r)
			} else if err == nil {
				o.Target = new(Target)
				err = o.Target.UnmarshalAMQP(r)
			}
		case 7:
			o.Unsettled, err = readUnsettled(r)
		case 8:
			o.IncompleteUnsettled, err = r.ReadBool()
		case 9:
			o.InitialDeliveryCount, err = readUint32Ptr(r)
		case 10:
			o.MaxMessageSize, err = r.ReadUint64()
		case 11:
			o.OfferedCapabilities, err = r.ReadSymbols()
		case 12:
			o.DesiredCapabilities, err = r.ReadSymbols()
		case 13:
			o.Properties, err = r.ReadSymbolMap()
		default:
			err = r.Skip()
		}
		if err != nil {
			return c.fieldErr(i, err)
		}
	}
	return c.finish(r, present, 1<<0|1<<1|1<<2)
}

// Detach detaches the link endpoint from the session (part 2 section
// 2.7.7).
//
//	<type name="detach" class="composite" source="list" provides="frame">
//	    <descriptor name="amqp:detach:list" code="0x00000000:0x00000016"/>
//	    <field name="handle" type="handle" mandatory="true"/>
//	    <field name="closed" type="boolean" default="false"/>
//	    <field name="error" type="error"/>
//	</type>
type Detach struct {
	// Handle is the local handle of the link to be detached.
	Handle uint32

	// Closed says the link is closed, not just detached. go-amqp treats
	// closed=false as an error, so a broker always sets it.
	Closed bool

	// Error, if set, says why the link is being detached.
	Error *Error
}

func (*Detach) frameBody() {}

func (o *Detach) String() string {
	return fmt.Sprintf("Detach{Handle:%d Closed:%t Error:%v}", o.Handle, o.Closed, o.Error)
}

// AppendAMQP appends the encoded performative to dst.
func (o *Detach) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	err := o.marshal(&b)
	return b.Bytes(), err
}

func (o *Detach) marshal(b *encoding.Buffer) error {
	f := beginFields(b, DescriptorDetach)
	f.uint(o.Handle)
	f.boolOmitFalse(o.Closed)
	if err := f.value(o.Error, o.Error == nil); err != nil {
		return err
	}
	f.end()
	return nil
}

// UnmarshalAMQP decodes a detach performative.
func (o *Detach) UnmarshalAMQP(r *encoding.Reader) error {
	c, err := beginComposite(r, DescriptorDetach, "detach")
	if err != nil {
		return err
	}
	*o = Detach{}
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
			o.Closed, err = r.ReadBool()
		case 2:
			o.Error = new(Error)
			err = o.Error.UnmarshalAMQP(r)
		default:
			err = r.Skip()
		}
		if err != nil {
			return c.fieldErr(i, err)
		}
	}
	return c.finish(r, present, 1<<0)
}

// readUnsettled reads attach's unsettled map: delivery-tag to
// delivery-state.
func readUnsettled(r *encoding.Reader) (Map, error) {
	n, end, err := r.ReadMapHeader()
	if err != nil {
		return nil, err
	}
	m := make(Map, n)
	for i := range m {
		if m[i].Key, err = r.ReadBinary(); err != nil {
			return nil, err
		}
		var s DeliveryState
		if s, err = ReadDeliveryState(r); err != nil {
			return nil, err
		}
		if s != nil {
			m[i].Value = s
		}
	}
	return m, r.EndCompound(end)
}
