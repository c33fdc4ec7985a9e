package frames

import (
	"fmt"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
)

// Open negotiates connection parameters (part 2 section 2.7.1).
//
//	<type name="open" class="composite" source="list" provides="frame">
//	    <descriptor name="amqp:open:list" code="0x00000000:0x00000010"/>
//	    <field name="container-id" type="string" mandatory="true"/>
//	    <field name="hostname" type="string"/>
//	    <field name="max-frame-size" type="uint" default="4294967295"/>
//	    <field name="channel-max" type="ushort" default="65535"/>
//	    <field name="idle-time-out" type="milliseconds"/>
//	    <field name="outgoing-locales" type="ietf-language-tag" multiple="true"/>
//	    <field name="incoming-locales" type="ietf-language-tag" multiple="true"/>
//	    <field name="offered-capabilities" type="symbol" multiple="true"/>
//	    <field name="desired-capabilities" type="symbol" multiple="true"/>
//	    <field name="properties" type="fields"/>
//	</type>
type Open struct {
	// ContainerID is the id of the source container.
	ContainerID string

	// Hostname is the name of the target host: the DNS name the client
	// connected to, possibly with a port. Empty is absent.
	Hostname string

	// MaxFrameSize is the largest frame size that the sending peer is
	// able to accept on this connection. Absent decodes as the default,
	// 4294967295; 0 and the default are written as absent.
	MaxFrameSize uint32

	// ChannelMax is the highest channel number that can be used on the
	// connection. Absent decodes as the default, 65535; 0 and the default
	// are written as absent.
	ChannelMax uint16

	// IdleTimeOut is the idle time-out required by the sender, in
	// milliseconds. 0 is absent: no idle time-out.
	IdleTimeOut uint32

	// OutgoingLocales are the locales available for outgoing text.
	OutgoingLocales []Symbol

	// IncomingLocales are the desired locales for incoming text in
	// decreasing level of preference.
	IncomingLocales []Symbol

	// OfferedCapabilities are the extension capabilities the sender
	// supports.
	OfferedCapabilities []Symbol

	// DesiredCapabilities are the extension capabilities the sender may
	// use if the receiver supports them.
	DesiredCapabilities []Symbol

	// Properties are connection properties (for example product and
	// version).
	Properties map[Symbol]any
}

func (*Open) frameBody() {}

func (o *Open) String() string { return fmt.Sprintf("Open%+v", *o) }

// AppendAMQP appends the encoded performative to dst.
func (o *Open) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	err := o.marshal(&b)
	return b.Bytes(), err
}

func (o *Open) marshal(b *encoding.Buffer) error {
	f := beginFields(b, DescriptorOpen)
	f.strAlways(o.ContainerID)
	f.str(o.Hostname)
	if o.MaxFrameSize == DefaultMaxFrameSize {
		f.null()
	} else {
		f.uintOmitZero(o.MaxFrameSize)
	}
	if o.ChannelMax == 0 || o.ChannelMax == 65535 {
		f.null()
	} else {
		b.WriteUshort(o.ChannelMax)
		f.l.Next()
	}
	f.uintOmitZero(o.IdleTimeOut)
	f.syms(o.OutgoingLocales)
	f.syms(o.IncomingLocales)
	f.syms(o.OfferedCapabilities)
	f.syms(o.DesiredCapabilities)
	if err := f.symMap(o.Properties); err != nil {
		return err
	}
	f.end()
	return nil
}

// UnmarshalAMQP decodes an open performative.
func (o *Open) UnmarshalAMQP(r *encoding.Reader) error {
	c, err := beginComposite(r, DescriptorOpen, "open")
	if err != nil {
		return err
	}
	*o = Open{MaxFrameSize: DefaultMaxFrameSize, ChannelMax: 65535}
	var present uint32
	for i := 0; i < c.n; i++ {
		if r.ReadNull() {
			continue
		}
		present |= 1 << i
		switch i {
		case 0:
			o.ContainerID, err = r.ReadString()
		case 1:
			o.Hostname, err = r.ReadString()
		case 2:
			o.MaxFrameSize, err = r.ReadUint32()
		case 3:
			o.ChannelMax, err = r.ReadUint16()
		case 4:
			o.IdleTimeOut, err = r.ReadUint32()
		case 5:
			o.OutgoingLocales, err = r.ReadSymbols()
		case 6:
			o.IncomingLocales, err = r.ReadSymbols()
		case 7:
			o.OfferedCapabilities, err = r.ReadSymbols()
		case 8:
			o.DesiredCapabilities, err = r.ReadSymbols()
		case 9:
			o.Properties, err = r.ReadSymbolMap()
		default:
			err = r.Skip()
		}
		if err != nil {
			return c.fieldErr(i, err)
		}
	}
	return c.finish(r, present, 1<<0)
}

// Begin begins a session on a channel (part 2 section 2.7.2).
//
//	<type name="begin" class="composite" source="list" provides="frame">
//	    <descriptor name="amqp:begin:list" code="0x00000000:0x00000011"/>
//	    <field name="remote-channel" type="ushort"/>
//	    <field name="next-outgoing-id" type="transfer-number" mandatory="true"/>
//	    <field name="incoming-window" type="uint" mandatory="true"/>
//	    <field name="outgoing-window" type="uint" mandatory="true"/>
//	    <field name="handle-max" type="handle" default="4294967295"/>
//	    <field name="offered-capabilities" type="symbol" multiple="true"/>
//	    <field name="desired-capabilities" type="symbol" multiple="true"/>
//	    <field name="properties" type="fields"/>
//	</type>
type Begin struct {
	// RemoteChannel is, if a session is locally initiated, absent (nil);
	// if it is remotely initiated, the channel of the remote begin this
	// frame answers. A broker's reply always sets it.
	RemoteChannel *uint16

	// NextOutgoingID is the transfer-id to assign to the next transfer
	// frame.
	NextOutgoingID uint32

	// IncomingWindow is the initial incoming-window of the sender.
	IncomingWindow uint32

	// OutgoingWindow is the initial outgoing-window of the sender.
	OutgoingWindow uint32

	// HandleMax is the maximum handle value that can be used on the
	// session. Absent decodes as the default, 4294967295; 0 and the
	// default are written as absent.
	HandleMax uint32

	// OfferedCapabilities are the extension capabilities the sender
	// supports.
	OfferedCapabilities []Symbol

	// DesiredCapabilities are the extension capabilities the sender may
	// use if the receiver supports them.
	DesiredCapabilities []Symbol

	// Properties are session properties.
	Properties map[Symbol]any
}

func (*Begin) frameBody() {}

func (o *Begin) String() string {
	rc := "<nil>"
	if o.RemoteChannel != nil {
		rc = fmt.Sprint(*o.RemoteChannel)
	}
	return fmt.Sprintf("Begin{RemoteChannel:%s NextOutgoingID:%d IncomingWindow:%d OutgoingWindow:%d HandleMax:%d OfferedCapabilities:%v DesiredCapabilities:%v Properties:%v}",
		rc, o.NextOutgoingID, o.IncomingWindow, o.OutgoingWindow, o.HandleMax, o.OfferedCapabilities, o.DesiredCapabilities, o.Properties)
}

// AppendAMQP appends the encoded performative to dst.
func (o *Begin) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	err := o.marshal(&b)
	return b.Bytes(), err
}

func (o *Begin) marshal(b *encoding.Buffer) error {
	f := beginFields(b, DescriptorBegin)
	f.ushortPtr(o.RemoteChannel)
	f.uint(o.NextOutgoingID)
	f.uint(o.IncomingWindow)
	f.uint(o.OutgoingWindow)
	if o.HandleMax == 4294967295 {
		f.null()
	} else {
		f.uintOmitZero(o.HandleMax)
	}
	f.syms(o.OfferedCapabilities)
	f.syms(o.DesiredCapabilities)
	if err := f.symMap(o.Properties); err != nil {
		return err
	}
	f.end()
	return nil
}

// UnmarshalAMQP decodes a begin performative.
func (o *Begin) UnmarshalAMQP(r *encoding.Reader) error {
	c, err := beginComposite(r, DescriptorBegin, "begin")
	if err != nil {
		return err
	}
	*o = Begin{HandleMax: 4294967295}
	var present uint32
	for i := 0; i < c.n; i++ {
		if r.ReadNull() {
			continue
		}
		present |= 1 << i
		switch i {
		case 0:
			var v uint16
			v, err = r.ReadUint16()
			o.RemoteChannel = &v
		case 1:
			o.NextOutgoingID, err = r.ReadUint32()
		case 2:
			o.IncomingWindow, err = r.ReadUint32()
		case 3:
			o.OutgoingWindow, err = r.ReadUint32()
		case 4:
			o.HandleMax, err = r.ReadUint32()
		case 5:
			o.OfferedCapabilities, err = r.ReadSymbols()
		case 6:
			o.DesiredCapabilities, err = r.ReadSymbols()
		case 7:
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

// End ends the session (part 2 section 2.7.8).
//
//	<type name="end" class="composite" source="list" provides="frame">
//	    <descriptor name="amqp:end:list" code="0x00000000:0x00000017"/>
//	    <field name="error" type="error"/>
//	</type>
type End struct {
	// Error, if set, says why the session is being ended.
	Error *Error
}

func (*End) frameBody() {}

func (o *End) String() string { return fmt.Sprintf("End{Error:%v}", o.Error) }

// AppendAMQP appends the encoded performative to dst.
func (o *End) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	err := marshalErrorOnly(&b, DescriptorEnd, o.Error)
	return b.Bytes(), err
}

// UnmarshalAMQP decodes an end performative.
func (o *End) UnmarshalAMQP(r *encoding.Reader) error {
	e, err := unmarshalErrorOnly(r, DescriptorEnd, "end")
	o.Error = e
	return err
}

// Close closes the connection (part 2 section 2.7.9).
//
//	<type name="close" class="composite" source="list" provides="frame">
//	    <descriptor name="amqp:close:list" code="0x00000000:0x00000018"/>
//	    <field name="error" type="error"/>
//	</type>
type Close struct {
	// Error, if set, says why the connection is being closed.
	Error *Error
}

func (*Close) frameBody() {}

func (o *Close) String() string { return fmt.Sprintf("Close{Error:%v}", o.Error) }

// AppendAMQP appends the encoded performative to dst.
func (o *Close) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	err := marshalErrorOnly(&b, DescriptorClose, o.Error)
	return b.Bytes(), err
}

// UnmarshalAMQP decodes a close performative.
func (o *Close) UnmarshalAMQP(r *encoding.Reader) error {
	e, err := unmarshalErrorOnly(r, DescriptorClose, "close")
	o.Error = e
	return err
}

func marshalErrorOnly(b *encoding.Buffer, descriptor uint64, e *Error) error {
	f := beginFields(b, descriptor)
	if err := f.value(e, e == nil); err != nil {
		return err
	}
	f.end()
	return nil
}

func unmarshalErrorOnly(r *encoding.Reader, descriptor uint64, name string) (*Error, error) {
	c, err := beginComposite(r, descriptor, name)
	if err != nil {
		return nil, err
	}
	var e *Error
	for i := 0; i < c.n; i++ {
		if r.ReadNull() {
			continue
		}
		if i == 0 {
			e = new(Error)
			err = e.UnmarshalAMQP(r)
		} else {
			err = r.Skip()
		}
		if err != nil {
			return nil, c.fieldErr(i, err)
		}
	}
	return e, c.finish(r, 0, 0)
}
