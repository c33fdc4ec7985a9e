package frames

import (
	"fmt"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
)

// Source is the source terminus of a link (part 3 section 3.5.3).
//
//	<type name="source" class="composite" source="list" provides="source">
//	    <descriptor name="amqp:source:list" code="0x00000000:0x00000028"/>
//	    <field name="address" type="*" requires="address"/>
//	    <field name="durable" type="terminus-durability" default="none"/>
//	    <field name="expiry-policy" type="terminus-expiry-policy" default="session-end"/>
//	    <field name="timeout" type="seconds" default="0"/>
//	    <field name="dynamic" type="boolean" default="false"/>
//	    <field name="dynamic-node-properties" type="node-properties"/>
//	    <field name="distribution-mode" type="symbol" requires="distribution-mode"/>
//	    <field name="filter" type="filter-set"/>
//	    <field name="default-outcome" type="*" requires="outcome"/>
//	    <field name="outcomes" type="symbol" multiple="true"/>
//	    <field name="capabilities" type="symbol" multiple="true"/>
//	</type>
type Source struct {
	// Address of the source: the address of the node from which messages
	// are moved or copied. Empty is absent (as for a dynamic source).
	Address string

	// Durable says what state of the terminus is retained durably.
	Durable TerminusDurability

	// ExpiryPolicy says when the expiry timer of the terminus starts.
	// Absent decodes as the default, ExpirySessionEnd; empty and the
	// default are written as absent.
	ExpiryPolicy TerminusExpiryPolicy

	// Timeout is the duration in seconds that an expiring terminus is
	// retained.
	Timeout uint32

	// Dynamic requests the receiving peer to dynamically create a node
	// and pick its address.
	Dynamic bool

	// DynamicNodeProperties are properties of the dynamically created
	// node.
	DynamicNodeProperties map[Symbol]any

	// DistributionMode says whether messages are moved or copied
	// (DistributionModeMove, DistributionModeCopy). Empty is absent.
	DistributionMode Symbol

	// Filter is the filter-set: predicates to filter the messages
	// admitted onto the link. The values keep the peer's encoding (a
	// Described, a plain string, or nil), so they can be echoed back
	// as sent: Service Bus's com.microsoft:session-filter arrives
	// described from Go and as a plain string or null from JS.
	Filter map[Symbol]any

	// DefaultOutcome is the outcome for unsettled transfers if the link
	// is closed while they remain unsettled.
	DefaultOutcome DeliveryState

	// Outcomes are the descriptor names of the outcomes supported.
	Outcomes []Symbol

	// Capabilities are the extension capabilities of the source.
	Capabilities []Symbol
}

func (s *Source) String() string {
	if s == nil {
		return "<nil>"
	}
	return fmt.Sprintf("Source%+v", *s)
}

// AppendAMQP appends the encoded source to dst.
func (s *Source) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	err := s.marshal(&b)
	return b.Bytes(), err
}

func (s *Source) marshal(b *encoding.Buffer) error {
	f := beginFields(b, DescriptorSource)
	f.str(s.Address)
	f.uintOmitZero(uint32(s.Durable))
	f.expiryPolicy(s.ExpiryPolicy)
	f.uintOmitZero(s.Timeout)
	f.boolOmitFalse(s.Dynamic)
	if err := f.symMap(s.DynamicNodeProperties); err != nil {
		return err
	}
	f.sym(s.DistributionMode)
	if err := f.symMap(s.Filter); err != nil {
		return err
	}
	if err := f.state(s.DefaultOutcome); err != nil {
		return err
	}
	f.syms(s.Outcomes)
	f.syms(s.Capabilities)
	f.end()
	return nil
}

// UnmarshalAMQP decodes a source.
func (s *Source) UnmarshalAMQP(r *encoding.Reader) error {
	c, err := beginComposite(r, DescriptorSource, "source")
	if err != nil {
		return err
	}
	*s = Source{ExpiryPolicy: ExpirySessionEnd}
	for i := 0; i < c.n; i++ {
		if r.ReadNull() {
			continue
		}
		switch i {
		case 0:
			s.Address, err = readAddress(r)
		case 1:
			var v uint32
			v, err = r.ReadUint32()
			s.Durable = TerminusDurability(v)
		case 2:
			s.ExpiryPolicy, err = r.ReadSymbol()
		case 3:
			s.Timeout, err = r.ReadUint32()
		case 4:
			s.Dynamic, err = r.ReadBool()
		case 5:
			s.DynamicNodeProperties, err = r.ReadSymbolMap()
		case 6:
			s.DistributionMode, err = r.ReadSymbol()
		case 7:
			s.Filter, err = r.ReadSymbolMap()
		case 8:
			s.DefaultOutcome, err = readDeliveryState(r)
		case 9:
			s.Outcomes, err = r.ReadSymbols()
		case 10:
			s.Capabilities, err = r.ReadSymbols()
		default:
			err = r.Skip()
		}
		if err != nil {
			return c.fieldErr(i, err)
		}
	}
	return c.finish(r, 0, 0)
}

// readAddress reads an address field. The spec leaves its type open
// ("*" requires address); every known peer sends a string, some a symbol.
func readAddress(r *encoding.Reader) (string, error) {
	c, err := r.PeekCode()
	if err != nil {
		return "", err
	}
	if c == encoding.TypeCodeSym8 || c == encoding.TypeCodeSym32 {
		s, err := r.ReadSymbol()
		return string(s), err
	}
	return r.ReadString()
}

// Target is the target terminus of a link (part 3 section 3.5.4).
//
//	<type name="target" class="composite" source="list" provides="target">
//	    <descriptor name="amqp:target:list" code="0x00000000:0x00000029"/>
//	    <field name="address" type="*" requires="address"/>
//	    <field name="durable" type="terminus-durability" default="none"/>
//	    <field name="expiry-policy" type="terminus-expiry-policy" default="session-end"/>
//	    <field name="timeout" type="seconds" default="0"/>
//	    <field name="dynamic" type="boolean" default="false"/>
//	    <field name="dynamic-node-properties" type="node-properties"/>
//	    <field name="capabilities" type="symbol" multiple="true"/>
//	</type>
type Target struct {
	// Address of the target: the node to which messages are sent. Empty
	// is absent (rhea's $cbs receiver sends a target without address).
	Address string

	// Durable says what state of the terminus is retained durably.
	Durable TerminusDurability

	// ExpiryPolicy says when the expiry timer of the terminus starts.
	// Absent decodes as the default, ExpirySessionEnd; empty and the
	// default are written as absent.
	ExpiryPolicy TerminusExpiryPolicy

	// Timeout is the duration in seconds that an expiring terminus is
	// retained.
	Timeout uint32

	// Dynamic requests the receiving peer to dynamically create a node
	// and pick its address.
	Dynamic bool

	// DynamicNodeProperties are properties of the dynamically created
	// node.
	DynamicNodeProperties map[Symbol]any

	// Capabilities are the extension capabilities of the target.
	Capabilities []Symbol
}

func (t *Target) String() string {
	if t == nil {
		return "<nil>"
	}
	return fmt.Sprintf("Target%+v", *t)
}

// AppendAMQP appends the encoded target to dst.
func (t *Target) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	err := t.marshal(&b)
	return b.Bytes(), err
}

func (t *Target) marshal(b *encoding.Buffer) error {
	f := beginFields(b, DescriptorTarget)
	f.str(t.Address)
	f.uintOmitZero(uint32(t.Durable))
	f.expiryPolicy(t.ExpiryPolicy)
	f.uintOmitZero(t.Timeout)
	f.boolOmitFalse(t.Dynamic)
	if err := f.symMap(t.DynamicNodeProperties); err != nil {
		return err
	}
	f.syms(t.Capabilities)
	f.end()
	return nil
}

// UnmarshalAMQP decodes a target.
func (t *Target) UnmarshalAMQP(r *encoding.Reader) error {
	c, err := beginComposite(r, DescriptorTarget, "target")
	if err != nil {
		return err
	}
	*t = Target{ExpiryPolicy: ExpirySessionEnd}
	for i := 0; i < c.n; i++ {
		if r.ReadNull() {
			continue
		}
		switch i {
		case 0:
			t.Address, err = readAddress(r)
		case 1:
			var v uint32
			v, err = r.ReadUint32()
			t.Durable = TerminusDurability(v)
		case 2:
			t.ExpiryPolicy, err = r.ReadSymbol()
		case 3:
			t.Timeout, err = r.ReadUint32()
		case 4:
			t.Dynamic, err = r.ReadBool()
		case 5:
			t.DynamicNodeProperties, err = r.ReadSymbolMap()
		case 6:
			t.Capabilities, err = r.ReadSymbols()
		default:
			err = r.Skip()
		}
		if err != nil {
			return c.fieldErr(i, err)
		}
	}
	return c.finish(r, 0, 0)
}

// Coordinator is the target of a link to a transaction coordinator (part
// 4 section 4.5.1); the Service Bus layer serves it
// (docs/wire/transactions.md).
//
//	<type name="coordinator" class="composite" source="list" provides="target">
//	    <descriptor name="amqp:coordinator:list" code="0x00000000:0x00000030"/>
//	    <field name="capabilities" type="symbol" requires="txn-capability" multiple="true"/>
//	</type>
type Coordinator struct {
	// Capabilities are the transaction capabilities requested.
	Capabilities []Symbol
}

func (t *Coordinator) String() string {
	if t == nil {
		return "<nil>"
	}
	return fmt.Sprintf("Coordinator%+v", *t)
}

// AppendAMQP appends the encoded coordinator to dst.
func (t *Coordinator) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	f := beginFields(&b, DescriptorCoordinator)
	f.syms(t.Capabilities)
	f.end()
	return b.Bytes(), nil
}

// UnmarshalAMQP decodes a coordinator.
func (t *Coordinator) UnmarshalAMQP(r *encoding.Reader) error {
	c, err := beginComposite(r, DescriptorCoordinator, "coordinator")
	if err != nil {
		return err
	}
	*t = Coordinator{}
	for i := 0; i < c.n; i++ {
		if r.ReadNull() {
			continue
		}
		if i == 0 {
			t.Capabilities, err = r.ReadSymbols()
		} else {
			err = r.Skip()
		}
		if err != nil {
			return c.fieldErr(i, err)
		}
	}
	return c.finish(r, 0, 0)
}

// expiryPolicy writes a terminus expiry policy, leaving out the default.
func (f *fields) expiryPolicy(p TerminusExpiryPolicy) {
	if p == ExpirySessionEnd {
		f.l.Null()
		return
	}
	f.sym(p)
}
