package frames

import (
	"fmt"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
)

// Well-known SASL mechanism names.
const (
	SASLMechanismAnonymous Symbol = "ANONYMOUS"
	SASLMechanismPlain     Symbol = "PLAIN"
	SASLMechanismExternal  Symbol = "EXTERNAL"
	SASLMechanismMSSBCBS   Symbol = "MSSBCBS"
)

// SASLMechanisms advertises the available SASL mechanisms (part 5
// section 5.3.3.1).
//
//	<type name="sasl-mechanisms" class="composite" source="list" provides="sasl-frame">
//	    <descriptor name="amqp:sasl-mechanisms:list" code="0x00000000:0x00000040"/>
//	    <field name="sasl-server-mechanisms" type="symbol" multiple="true" mandatory="true"/>
//	</type>
type SASLMechanisms struct {
	// Mechanisms are the supported sasl mechanisms, in decreasing level
	// of preference.
	Mechanisms []Symbol
}

func (*SASLMechanisms) frameBody() {}

func (o *SASLMechanisms) String() string { return fmt.Sprintf("SASLMechanisms%+v", *o) }

// AppendAMQP appends the encoded frame body to dst.
func (o *SASLMechanisms) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	f := beginFields(&b, DescriptorSASLMechanisms)
	b.WriteSymbolArray(o.Mechanisms)
	f.l.Next()
	f.end()
	return b.Bytes(), nil
}

// UnmarshalAMQP decodes a sasl-mechanisms frame body.
func (o *SASLMechanisms) UnmarshalAMQP(r *encoding.Reader) error {
	c, err := beginComposite(r, DescriptorSASLMechanisms, "sasl-mechanisms")
	if err != nil {
		return err
	}
	*o = SASLMechanisms{}
	var present uint32
	for i := 0; i < c.n; i++ {
		if r.ReadNull() {
			continue
		}
		present |= 1 << i
		if i == 0 {
			o.Mechanisms, err = r.ReadSymbols()
		} else {
			err = r.Skip()
		}
		if err != nil {
			return c.fieldErr(i, err)
		}
	}
	return c.finish(r, present, 1<<0)
}

// SASLInit selects the mechanism and carries the initial response (part 5
// section 5.3.3.2).
//
//	<type name="sasl-init" class="composite" source="list" provides="sasl-frame">
//	    <descriptor name="amqp:sasl-init:list" code="0x00000000:0x00000041"/>
//	    <field name="mechanism" type="symbol" mandatory="true"/>
//	    <field name="initial-response" type="binary"/>
//	    <field name="hostname" type="string"/>
//	</type>
type SASLInit struct {
	// Mechanism is the name of the SASL mechanism used for the exchange.
	Mechanism Symbol
	// InitialResponse is the initial response as defined for the chosen
	// mechanism; nil is absent.
	InitialResponse []byte
	// Hostname is the name of the target host. Empty is absent.
	Hostname string
}

func (*SASLInit) frameBody() {}

func (o *SASLInit) String() string {
	return fmt.Sprintf("SASLInit{Mechanism:%s InitialResponse:%d bytes Hostname:%q}", o.Mechanism, len(o.InitialResponse), o.Hostname)
}

// AppendAMQP appends the encoded frame body to dst.
func (o *SASLInit) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	f := beginFields(&b, DescriptorSASLInit)
	f.symAlways(o.Mechanism)
	f.binary(o.InitialResponse)
	f.str(o.Hostname)
	f.end()
	return b.Bytes(), nil
}

// UnmarshalAMQP decodes a sasl-init frame body.
func (o *SASLInit) UnmarshalAMQP(r *encoding.Reader) error {
	c, err := beginComposite(r, DescriptorSASLInit, "sasl-init")
	if err != nil {
		return err
	}
	*o = SASLInit{}
	var present uint32
	for i := 0; i < c.n; i++ {
		if r.ReadNull() {
			continue
		}
		present |= 1 << i
		switch i {
		case 0:
			o.Mechanism, err = r.ReadSymbol()
		case 1:
			o.InitialResponse, err = r.ReadBinary()
		case 2:
			o.Hostname, err = r.ReadString()
		default:
			err = r.Skip()
		}
		if err != nil {
			return c.fieldErr(i, err)
		}
	}
	return c.finish(r, present, 1<<0)
}

// SASLChallenge carries a security challenge (part 5 section 5.3.3.3).
//
//	<type name="sasl-challenge" class="composite" source="list" provides="sasl-frame">
//	    <descriptor name="amqp:sasl-challenge:list" code="0x00000000:0x00000042"/>
//	    <field name="challenge" type="binary" mandatory="true"/>
//	</type>
type SASLChallenge struct {
	// Challenge is the challenge information.
	Challenge []byte
}

func (*SASLChallenge) frameBody() {}

func (o *SASLChallenge) String() string {
	return fmt.Sprintf("SASLChallenge{%d bytes}", len(o.Challenge))
}

// AppendAMQP appends the encoded frame body to dst.
func (o *SASLChallenge) AppendAMQP(dst []byte) ([]byte, error) {
	return appendBinaryOnly(dst, DescriptorSASLChallenge, o.Challenge), nil
}

// UnmarshalAMQP decodes a sasl-challenge frame body.
func (o *SASLChallenge) UnmarshalAMQP(r *encoding.Reader) error {
	p, err := unmarshalBinaryOnly(r, DescriptorSASLChallenge, "sasl-challenge")
	o.Challenge = p
	return err
}

// SASLResponse carries a security response (part 5 section 5.3.3.4).
//
//	<type name="sasl-response" class="composite" source="list" provides="sasl-frame">
//	    <descriptor name="amqp:sasl-response:list" code="0x00000000:0x00000043"/>
//	    <field name="response" type="binary" mandatory="true"/>
//	</type>
type SASLResponse struct {
	// Response is the response information.
	Response []byte
}

func (*SASLResponse) frameBody() {}

func (o *SASLResponse) String() string {
	return fmt.Sprintf("SASLResponse{%d bytes}", len(o.Response))
}

// AppendAMQP appends the encoded frame body to dst.
func (o *SASLResponse) AppendAMQP(dst []byte) ([]byte, error) {
	return appendBinaryOnly(dst, DescriptorSASLResponse, o.Response), nil
}

// UnmarshalAMQP decodes a sasl-response frame body.
func (o *SASLResponse) UnmarshalAMQP(r *encoding.Reader) error {
	p, err := unmarshalBinaryOnly(r, DescriptorSASLResponse, "sasl-response")
	o.Response = p
	return err
}

func appendBinaryOnly(dst []byte, descriptor uint64, p []byte) []byte {
	var b encoding.Buffer
	b.SetBytes(dst)
	f := beginFields(&b, descriptor)
	b.WriteBinary(p)
	f.l.Next()
	f.end()
	return b.Bytes()
}

func unmarshalBinaryOnly(r *encoding.Reader, descriptor uint64, name string) ([]byte, error) {
	c, err := beginComposite(r, descriptor, name)
	if err != nil {
		return nil, err
	}
	var p []byte
	var present uint32
	for i := 0; i < c.n; i++ {
		if r.ReadNull() {
			continue
		}
		present |= 1 << i
		if i == 0 {
			p, err = r.ReadBinary()
		} else {
			err = r.Skip()
		}
		if err != nil {
			return nil, c.fieldErr(i, err)
		}
	}
	return p, c.finish(r, present, 1<<0)
}

// SASLOutcome indicates the outcome of the SASL dialog (part 5 section
// 5.3.3.5).
//
//	<type name="sasl-outcome" class="composite" source="list" provides="sasl-frame">
//	    <descriptor name="amqp:sasl-outcome:list" code="0x00000000:0x00000044"/>
//	    <field name="code" type="sasl-code" mandatory="true"/>
//	    <field name="additional-data" type="binary"/>
//	</type>
type SASLOutcome struct {
	// Code indicates the outcome of the sasl dialog.
	Code SASLCode
	// AdditionalData is additional data as specified in RFC-4422; nil is
	// absent.
	AdditionalData []byte
}

func (*SASLOutcome) frameBody() {}

func (o *SASLOutcome) String() string {
	return fmt.Sprintf("SASLOutcome{Code:%d AdditionalData:%d bytes}", o.Code, len(o.AdditionalData))
}

// AppendAMQP appends the encoded frame body to dst.
func (o *SASLOutcome) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	f := beginFields(&b, DescriptorSASLOutcome)
	f.ubyte(uint8(o.Code))
	f.binary(o.AdditionalData)
	f.end()
	return b.Bytes(), nil
}

// UnmarshalAMQP decodes a sasl-outcome frame body.
func (o *SASLOutcome) UnmarshalAMQP(r *encoding.Reader) error {
	c, err := beginComposite(r, DescriptorSASLOutcome, "sasl-outcome")
	if err != nil {
		return err
	}
	*o = SASLOutcome{}
	var present uint32
	for i := 0; i < c.n; i++ {
		if r.ReadNull() {
			continue
		}
		present |= 1 << i
		switch i {
		case 0:
			var v uint8
			v, err = r.ReadUint8()
			o.Code = SASLCode(v)
		case 1:
			o.AdditionalData, err = r.ReadBinary()
		default:
			err = r.Skip()
		}
		if err != nil {
			return c.fieldErr(i, err)
		}
	}
	return c.finish(r, present, 1<<0)
}
