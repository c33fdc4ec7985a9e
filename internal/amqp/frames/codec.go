package frames

import (
	"fmt"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
)

// composite decodes the field list of a described composite type. The
// Unmarshal methods are field tables over it:
//
//	c, err := beginComposite(r, DescriptorX, "x")
//	for i := 0; i < c.n; i++ {
//		if r.ReadNull() { continue }
//		switch i { case 0: ... }
//	}
//	return c.finish(r, present, mandatory)
//
// composite holds no pointer to the Reader, so that formatting an error
// from it does not make the Reader escape to the heap.
type composite struct {
	name string
	n    int
	end  int
}

func beginComposite(r *encoding.Reader, want uint64, name string) (composite, error) {
	c := composite{name: name}
	code, sym, err := r.ReadDescriptor()
	if err != nil {
		return c, fmt.Errorf("frames: %s: %w", name, err)
	}
	if sym != "" {
		code = symbolicDescriptor(sym)
	}
	if code != want {
		if sym != "" {
			return c, fmt.Errorf("frames: %s: unexpected descriptor %s", name, sym)
		}
		return c, fmt.Errorf("frames: %s: unexpected descriptor 0x%x", name, code)
	}
	c.n, c.end, err = r.ReadListHeader()
	if err != nil {
		return c, fmt.Errorf("frames: %s: %w", name, err)
	}
	return c, nil
}

// fieldErr wraps a decoding error of field i.
func (c *composite) fieldErr(i int, err error) error {
	return fmt.Errorf("frames: %s field %d: %w", c.name, i, err)
}

// finish checks the list's extent and that every mandatory field (a bit
// per field index) was present.
func (c *composite) finish(r *encoding.Reader, present, mandatory uint32) error {
	if err := r.EndCompound(c.end); err != nil {
		return fmt.Errorf("frames: %s: %w", c.name, err)
	}
	if missing := mandatory &^ present; missing != 0 {
		i := 0
		for missing&1 == 0 {
			missing >>= 1
			i++
		}
		return fmt.Errorf("%w: %s field %d", ErrMissingField, c.name, i)
	}
	return nil
}

// fields writes the field list of a composite type.
type fields struct {
	b *encoding.Buffer
	l encoding.ListWriter
}

func beginFields(b *encoding.Buffer, descriptor uint64) fields {
	b.WriteDescriptor(descriptor)
	return fields{b: b, l: b.BeginList()}
}

func (f *fields) end()  { f.l.End() }
func (f *fields) null() { f.l.Null() }

func (f *fields) uint(v uint32) { f.b.WriteUint(v); f.l.Next() }

func (f *fields) uintPtr(p *uint32) {
	if p == nil {
		f.l.Null()
		return
	}
	f.uint(*p)
}

// uintOmitZero writes v, or an absent field when v is 0.
func (f *fields) uintOmitZero(v uint32) {
	if v == 0 {
		f.l.Null()
		return
	}
	f.uint(v)
}

func (f *fields) ulong(v uint64) { f.b.WriteUlong(v); f.l.Next() }

func (f *fields) ulongOmitZero(v uint64) {
	if v == 0 {
		f.l.Null()
		return
	}
	f.ulong(v)
}

func (f *fields) ushortPtr(p *uint16) {
	if p == nil {
		f.l.Null()
		return
	}
	f.b.WriteUshort(*p)
	f.l.Next()
}

func (f *fields) ubyte(v uint8) { f.b.WriteUbyte(v); f.l.Next() }

func (f *fields) bool(v bool) { f.b.WriteBool(v); f.l.Next() }

// boolOmitFalse writes true, or an absent field for false (the default of
// every optional boolean field in the spec).
func (f *fields) boolOmitFalse(v bool) {
	if !v {
		f.l.Null()
		return
	}
	f.bool(true)
}

func (f *fields) str(s string) {
	if s == "" {
		f.l.Null()
		return
	}
	f.b.WriteString(s)
	f.l.Next()
}

// strAlways writes s even when it is empty (mandatory string fields).
func (f *fields) strAlways(s string) { f.b.WriteString(s); f.l.Next() }

func (f *fields) sym(s Symbol) {
	if s == "" {
		f.l.Null()
		return
	}
	f.b.WriteSymbol(s)
	f.l.Next()
}

func (f *fields) symAlways(s Symbol) { f.b.WriteSymbol(s); f.l.Next() }

func (f *fields) syms(v []Symbol) {
	if v == nil {
		f.l.Null()
		return
	}
	f.b.WriteSymbolArray(v)
	f.l.Next()
}

func (f *fields) binary(p []byte) {
	if p == nil {
		f.l.Null()
		return
	}
	f.b.WriteBinary(p)
	f.l.Next()
}

func (f *fields) symMap(m map[Symbol]any) error {
	if m == nil {
		f.l.Null()
		return nil
	}
	if err := f.b.WriteSymbolMap(m); err != nil {
		return err
	}
	f.l.Next()
	return nil
}

// value writes a Marshaler field, or an absent field for nil.
func (f *fields) value(v encoding.Marshaler, isNil bool) error {
	if isNil {
		f.l.Null()
		return nil
	}
	p, err := v.AppendAMQP(f.b.Bytes())
	if err != nil {
		return err
	}
	f.b.SetBytes(p)
	f.l.Next()
	return nil
}

func readUint32Ptr(r *encoding.Reader) (*uint32, error) {
	v, err := r.ReadUint32()
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// uintSlots holds the values of a performative's optional uint fields
// (Transfer.DeliveryID, Flow.LinkCredit, ...) when ParseBody allocates it
// together with the performative, so that those pointers cost no
// allocation of their own. A nil *uintSlots allocates each value, as
// UnmarshalAMQP called on its own does.
type uintSlots struct {
	v [5]uint32 // Flow has the most: five
	n int
}

// read reads a uint into the next free slot and returns its address.
func (s *uintSlots) read(r *encoding.Reader) (*uint32, error) {
	if s == nil || s.n == len(s.v) {
		return readUint32Ptr(r)
	}
	v, err := r.ReadUint32()
	if err != nil {
		return nil, err
	}
	p := &s.v[s.n]
	s.n++
	*p = v
	return p, nil
}

// unmarshalBytes decodes data, which must hold exactly one value, into u.
func unmarshalBytes(data []byte, u encoding.Unmarshaler) error {
	r := encoding.NewReader(data)
	if err := u.UnmarshalAMQP(r); err != nil {
		return err
	}
	if r.Len() != 0 {
		return fmt.Errorf("%w: %d bytes", ErrUnexpectedBytes, r.Len())
	}
	return nil
}
