package frames

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func appendFrame(t testing.TB, channel uint16, body Body) []byte {
	t.Helper()
	p, err := AppendFrame(nil, channel, body)
	if err != nil {
		t.Fatalf("AppendFrame(%v): %v", body, err)
	}
	return p
}

var sessionFilter = Described{Descriptor: uint64(0x137000000c), Value: "session-1"}

// fullBodies has every performative with every field set to a
// non-default value.
func fullBodies() []Body {
	return []Body{
		&Open{
			ContainerID: "busbar", Hostname: "localhost:5672", MaxFrameSize: 65536, ChannelMax: 1023,
			IdleTimeOut: 30000, OutgoingLocales: []Symbol{"en-US"}, IncomingLocales: []Symbol{"en-US", "fr"},
			OfferedCapabilities: []Symbol{"ANONYMOUS-RELAY"}, DesiredCapabilities: []Symbol{"x"},
			Properties: map[Symbol]any{"product": "MSGolangClient", "version": "v1.11.0"},
		},
		&Begin{
			RemoteChannel: Ptr[uint16](0), NextOutgoingID: 1, IncomingWindow: 5000, OutgoingWindow: 65534,
			HandleMax: 255, OfferedCapabilities: []Symbol{"a"}, DesiredCapabilities: []Symbol{"b"},
			Properties: map[Symbol]any{"k": int64(-1)},
		},
		&Attach{
			Name: "receiver-link", Handle: 3, Role: RoleReceiver,
			SndSettleMode: Ptr(SenderSettleModeUnsettled), RcvSettleMode: Ptr(ReceiverSettleModeSecond),
			Source: &Source{
				Address: "queue/Subscriptions/sub", Durable: DurabilityUnsettledState, ExpiryPolicy: ExpiryNever,
				Timeout: 60, Dynamic: true, DynamicNodeProperties: map[Symbol]any{"lifetime-policy": Described{Descriptor: DescriptorDeleteOnClose, Value: []any(nil)}},
				DistributionMode: DistributionModeMove,
				Filter:           map[Symbol]any{"com.microsoft:session-filter": sessionFilter, "js": "plain", "null": nil},
				DefaultOutcome:   &Modified{DeliveryFailed: true},
				Outcomes:         []Symbol{"amqp:accepted:list", "amqp:rejected:list"},
				Capabilities:     []Symbol{"queue"},
			},
			Target: &Target{
				Address: "client-1", Durable: DurabilityConfiguration, ExpiryPolicy: ExpiryLinkDetach, Timeout: 5,
				Dynamic: true, DynamicNodeProperties: map[Symbol]any{"x": true}, Capabilities: []Symbol{"temporary-queue"},
			},
			Unsettled:            Map{{Key: []byte{1, 2}, Value: &Accepted{}}, {Key: []byte{3}}},
			IncompleteUnsettled:  true,
			InitialDeliveryCount: Ptr[uint32](0),
			MaxMessageSize:       262144,
			OfferedCapabilities:  []Symbol{"o"}, DesiredCapabilities: []Symbol{"d"},
			Properties: map[Symbol]any{"com.microsoft:locked-until-utc": int64(638500000000000000), "com.microsoft:timeout": uint32(60000)},
		},
		&Flow{
			NextIncomingID: Ptr[uint32](7), IncomingWindow: 5000, NextOutgoingID: 9, OutgoingWindow: 100,
			Handle: Ptr[uint32](0), DeliveryCount: Ptr[uint32](12), LinkCredit: Ptr[uint32](0), Available: Ptr[uint32](3),
			Drain: true, Echo: true, Properties: map[Symbol]any{"p": "v"},
		},
		&Transfer{
			Handle: 1, DeliveryID: Ptr[uint32](1 << 31), DeliveryTag: bytes.Repeat([]byte{0xab}, 16),
			MessageFormat: Ptr(MessageFormatBatch), Settled: true, More: true, RcvSettleMode: Ptr(ReceiverSettleModeSecond),
			State: &Received{SectionNumber: 1, SectionOffset: 1 << 40}, Resume: true, Aborted: true, Batchable: true,
			Payload: []byte("\x00Su\xa0\x05hello"),
		},
		&Disposition{
			Role: RoleReceiver, First: 10, Last: Ptr[uint32](20), Settled: true,
			State: &Rejected{Error: &Error{Condition: "com.microsoft:dead-letter", Description: "bad",
				Info: map[Symbol]any{"DeadLetterReason": "r", "DeadLetterErrorDescription": "d"}}},
			Batchable: true,
		},
		&Detach{Handle: 4, Closed: true, Error: &Error{Condition: ErrCondNotFound, Description: "no such entity"}},
		&End{Error: &Error{Condition: ErrCondWindowViolation}},
		&Close{Error: &Error{Condition: ErrCondConnectionForced, Description: "bye", Info: map[Symbol]any{"n": int32(1)}}},
		&SASLMechanisms{Mechanisms: []Symbol{SASLMechanismMSSBCBS, SASLMechanismExternal, SASLMechanismAnonymous}},
		&SASLInit{Mechanism: SASLMechanismAnonymous, InitialResponse: []byte("anonymous"), Hostname: "localhost"},
		&SASLChallenge{Challenge: []byte("c")},
		&SASLResponse{Response: []byte("r")},
		&SASLOutcome{Code: SASLCodeSysTemp, AdditionalData: []byte("more")},
	}
}

func TestPerformativeRoundTrip(t *testing.T) {
	for _, body := range fullBodies() {
		t.Run(reflect.TypeOf(body).Elem().Name(), func(t *testing.T) {
			p := appendFrame(t, 7, body)
			f, n, err := ParseFrame(p, 0)
			if err != nil {
				t.Fatalf("ParseFrame(% x): %v", p, err)
			}
			if n != len(p) || f.Channel != 7 {
				t.Fatalf("n=%d of %d, channel %d", n, len(p), f.Channel)
			}
			wantType := FrameTypeAMQP
			if strings.HasPrefix(reflect.TypeOf(body).Elem().Name(), "SASL") {
				wantType = FrameTypeSASL
			}
			if f.Type != wantType || FrameType(p[5]) != wantType {
				t.Fatalf("frame type %d, want %d", f.Type, wantType)
			}
			if !reflect.DeepEqual(f.Body, body) {
				t.Fatalf("round trip:\n got %v\nwant %v", f.Body, body)
			}
			// Encoding is deterministic: re-encoding the decoded body gives
			// the same bytes.
			if p2 := appendFrame(t, 7, f.Body); !bytes.Equal(p, p2) {
				t.Fatalf("re-encoding differs:\n% x\n% x", p, p2)
			}
		})
	}
}

// TestMinimalPerformatives encodes performatives with only mandatory
// fields and checks the defaults that decoding fills in.
func TestMinimalPerformatives(t *testing.T) {
	tests := []struct {
		body Body
		hex  string // performative bytes after the frame header
		want Body
	}{
		{&Open{ContainerID: "c"}, "00 53 10 c0 04 01 a1 01 63",
			&Open{ContainerID: "c", MaxFrameSize: DefaultMaxFrameSize, ChannelMax: 65535}},
		{&Begin{NextOutgoingID: 1, IncomingWindow: 2, OutgoingWindow: 3}, "00 53 11 c0 08 04 40 52 01 52 02 52 03",
			&Begin{NextOutgoingID: 1, IncomingWindow: 2, OutgoingWindow: 3, HandleMax: 4294967295}},
		{&Attach{Name: "l", Handle: 0, Role: RoleSender}, "00 53 12 c0 06 03 a1 01 6c 43 42", nil},
		{&Flow{IncomingWindow: 1, NextOutgoingID: 2, OutgoingWindow: 3}, "00 53 13 c0 08 04 40 52 01 52 02 52 03", nil},
		{&Transfer{Handle: 1}, "00 53 14 c0 03 01 52 01", nil},
		{&Disposition{Role: RoleReceiver, First: 5}, "00 53 15 c0 04 02 41 52 05", nil},
		{&Detach{Handle: 2}, "00 53 16 c0 03 01 52 02", nil},
		{&End{}, "00 53 17 45", nil},
		{&Close{}, "00 53 18 45", nil},
		{&SASLOutcome{Code: SASLCodeOK}, "00 53 44 c0 03 01 50 00", nil},
		{&SASLMechanisms{Mechanisms: []Symbol{"ANONYMOUS"}}, "00 53 40 c0 0f 01 e0 0c 01 a3 09 41 4e 4f 4e 59 4d 4f 55 53", nil},
	}
	for _, tt := range tests {
		t.Run(tt.body.String(), func(t *testing.T) {
			p := appendFrame(t, 0, tt.body)
			want := unhex(t, tt.hex)
			if !bytes.Equal(p[HeaderSize:], want) {
				t.Fatalf("encoded\n got % x\nwant % x", p[HeaderSize:], want)
			}
			got, err := ParseBody(want)
			if err != nil {
				t.Fatal(err)
			}
			w := tt.want
			if w == nil {
				w = tt.body
			}
			if !reflect.DeepEqual(got, w) {
				t.Fatalf("decoded %v, want %v", got, w)
			}
		})
	}
}

// TestGoldenFrames pins whole frames, header included.
func TestGoldenFrames(t *testing.T) {
	tests := []struct {
		name string
		ch   uint16
		body Body
		hex  string
	}{
		{"transfer with payload", 1, &Transfer{Handle: 0, DeliveryID: Ptr[uint32](0), DeliveryTag: []byte{1},
			MessageFormat: Ptr[uint32](0), Payload: []byte("\x00Su\xa0\x01x")},
			"00 00 00 1a 02 00 00 01  00 53 14 c0 07 04 43 43 a0 01 01 43  00 53 75 a0 01 78"},
		{"settled accepted disposition", 0, &Disposition{Role: RoleReceiver, First: 3, Settled: true, State: &Accepted{}},
			"00 00 00 17 02 00 00 00  00 53 15 c0 0a 05 41 52 03 40 41 00 53 24 45"},
		{"released", 0, &Disposition{Role: RoleReceiver, First: 0, Last: Ptr[uint32](1), State: &Released{}},
			"00 00 00 17 02 00 00 00  00 53 15 c0 0a 05 41 43 52 01 40 00 53 26 45"},
		{"sasl outcome", 0, &SASLOutcome{Code: SASLCodeOK},
			"00 00 00 10 02 01 00 00  00 53 44 c0 03 01 50 00"},
		// An attach reply that echoes settle modes explicitly (even the
		// defaults), carries a null source and a target.
		{"attach reply with explicit modes", 2, &Attach{Name: "l", Handle: 1, Role: RoleReceiver,
			SndSettleMode: Ptr(SenderSettleModeMixed), RcvSettleMode: Ptr(ReceiverSettleModeFirst),
			Target: &Target{Address: "q"}},
			"00 00 00 22 02 00 00 02  00 53 12 c0 15 07 a1 01 6c 52 01 41 50 02 50 00 40 00 53 29 c0 04 01 a1 01 71"},
		{"link flow", 0, &Flow{IncomingWindow: 5000, NextOutgoingID: 1, OutgoingWindow: 5000, Handle: Ptr[uint32](0),
			DeliveryCount: Ptr[uint32](0), LinkCredit: Ptr[uint32](100)},
			"00 00 00 1f 02 00 00 00  00 53 13 c0 12 07 40 70 00 00 13 88 52 01 70 00 00 13 88 43 43 52 64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := unhex(t, tt.hex)
			got := appendFrame(t, tt.ch, tt.body)
			if !bytes.Equal(got, want) {
				t.Fatalf("\n got % x\nwant % x", got, want)
			}
		})
	}
	if got := AppendEmptyFrame(nil); !bytes.Equal(got, unhex(t, "00 00 00 08 02 00 00 00")) {
		t.Fatalf("empty frame % x", got)
	}
	if p, _ := (&Accepted{}).AppendAMQP(nil); !bytes.Equal(p, unhex(t, "00 53 24 45")) {
		t.Fatalf("accepted % x", p)
	}
}

func TestDeliveryStates(t *testing.T) {
	states := []DeliveryState{
		&Received{SectionNumber: 2, SectionOffset: 3},
		&Accepted{},
		&Rejected{},
		&Rejected{Error: &Error{Condition: "com.microsoft:message-lock-lost"}},
		&Released{},
		&Modified{},
		&Modified{UndeliverableHere: true, MessageAnnotations: map[Symbol]any{"k": "v"}},
		&TransactionalState{TxnID: []byte{1}, Outcome: &Accepted{}},
		&Declared{TxnID: []byte{2}},
	}
	for _, s := range states {
		d := &Disposition{Role: RoleSender, First: 1, State: s}
		p := appendFrame(t, 0, d)
		f, _, err := ParseFrame(p, 0)
		if err != nil {
			t.Fatalf("%v: %v", s, err)
		}
		if !reflect.DeepEqual(f.Body, d) {
			t.Errorf("state %v round-tripped to %v", s, f.Body.(*Disposition).State)
		}
		_ = s.String()
	}
	// Go's abandon sends modified as an empty described list.
	got, err := ReadDeliveryState(encoding.NewReader(unhex(t, "00 53 27 45")))
	if err != nil || !reflect.DeepEqual(got, &Modified{}) {
		t.Fatalf("empty modified: %v %v", got, err)
	}
	if s, err := ReadDeliveryState(encoding.NewReader([]byte{0x40})); s != nil || err != nil {
		t.Fatalf("null state: %v %v", s, err)
	}
	if _, err := ReadDeliveryState(encoding.NewReader(unhex(t, "00 53 7f 45"))); err == nil {
		t.Fatal("unknown state: no error")
	}
}

func TestCoordinatorAttach(t *testing.T) {
	a := &Attach{Name: "txn", Handle: 0, Role: RoleSender, Source: &Source{ExpiryPolicy: ExpirySessionEnd},
		Coordinator: &Coordinator{Capabilities: []Symbol{"amqp:local-transactions"}}}
	f, _, err := ParseFrame(appendFrame(t, 0, a), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.Body, a) {
		t.Fatalf("got %v", f.Body)
	}
}

func TestSymbolicDescriptors(t *testing.T) {
	// open with a symbolic descriptor and a single symbol where an array
	// is declared (multiple="true" allows it).
	var b encoding.Buffer
	b.WriteRaw([]byte{0x00})
	b.WriteSymbol("amqp:open:list")
	l := b.BeginList()
	b.WriteString("c")
	l.Next()
	for range 6 {
		l.Null()
	}
	b.WriteSymbol("cap")
	l.Next()
	l.End()
	got, err := ParseBody(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	o := got.(*Open)
	if o.ContainerID != "c" || !reflect.DeepEqual(o.OfferedCapabilities, []Symbol{"cap"}) {
		t.Fatalf("got %v", o)
	}
}

func TestParseBodyErrors(t *testing.T) {
	tests := []struct {
		name string
		hex  string
		want error
	}{
		{"unknown performative", "00 53 19 45", ErrUnknownBody},
		{"unknown symbolic", "00 a3 01 78 45", ErrUnknownBody},
		{"bytes after open", "00 53 10 c0 04 01 a1 01 63 00", ErrUnexpectedBytes},
		{"open without container-id", "00 53 10 45", ErrMissingField},
		{"open with null container-id", "00 53 10 c0 02 01 40", ErrMissingField},
		{"begin without windows", "00 53 11 c0 03 02 40 43", ErrMissingField},
		{"attach without role", "00 53 12 c0 05 02 a1 01 6c 43", ErrMissingField},
		{"transfer without handle", "00 53 14 45", ErrMissingField},
		{"disposition without first", "00 53 15 c0 02 01 41", ErrMissingField},
		{"error without condition", "00 53 16 c0 05 03 43 41 00 53 1d 45", ErrMissingField},
		{"wrong field type", "00 53 14 c0 03 01 a1 00", nil},
		{"bad snd-settle-mode", "00 53 12 c0 08 04 a1 01 6c 43 42 50 03", encoding.ErrInvalid},
		{"delivery tag too long", "00 53 14 c0 26 03 43 43 a0 21" + strings.Repeat(" 00", 33), encoding.ErrInvalid},
		{"not described", "c0 01 00", nil},
		{"list count beyond size", "00 53 18 c0 01 05", encoding.ErrInvalidSize},
		{"empty", "", encoding.ErrTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := ParseBody(unhex(t, tt.hex))
			if err == nil {
				t.Fatalf("decoded %v", b)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
		})
	}
}

func TestParseHeader(t *testing.T) {
	tests := []struct {
		name string
		hex  string
		max  uint32
		want error
	}{
		{"ok", "00 00 00 08 02 00 00 00", 0, nil},
		{"short", "00 00 00 08 02 00 00", 0, ErrIncomplete},
		{"size under header", "00 00 00 07 02 00 00 00", 0, ErrInvalidHeader},
		{"doff under 2", "00 00 00 08 01 00 00 00", 0, ErrInvalidHeader},
		{"doff beyond size", "00 00 00 08 03 00 00 00", 0, ErrInvalidHeader},
		{"unknown type", "00 00 00 08 02 02 00 00", 0, ErrInvalidHeader},
		{"too large", "00 00 02 01 02 00 00 00", 512, ErrFrameTooLarge},
		{"at limit", "00 00 02 00 02 00 00 00", 512, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseHeader(unhex(t, tt.hex), tt.max)
			if !errors.Is(err, tt.want) && !(err == nil && tt.want == nil) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
		})
	}
}

// TestReadFrame reads a stream of frames: a heartbeat, a frame with an
// extended header, a transfer, and a SASL frame.
func TestReadFrame(t *testing.T) {
	var stream []byte
	stream = AppendEmptyFrame(stream)
	// Extended header: doff=3, four ignored bytes.
	open := appendFrame(t, 0, &Open{ContainerID: "c"})
	ext := append([]byte{}, open[:HeaderSize]...)
	ext[3] += 4
	ext[4] = 3
	ext = append(ext, 0xde, 0xad, 0xbe, 0xef)
	ext = append(ext, open[HeaderSize:]...)
	stream = append(stream, ext...)
	tr := &Transfer{Handle: 1, DeliveryID: Ptr[uint32](0), DeliveryTag: []byte{0}, MessageFormat: Ptr[uint32](0), Payload: []byte("payload")}
	stream = append(stream, appendFrame(t, 5, tr)...)
	stream = append(stream, appendFrame(t, 0, &SASLOutcome{})...)

	r := bufio.NewReader(bytes.NewReader(stream))
	f, err := ReadFrame(r, 0)
	if err != nil || f.Body != nil {
		t.Fatalf("heartbeat: %v %v", f, err)
	}
	f, err = ReadFrame(r, 0)
	if err != nil || f.Body.(*Open).ContainerID != "c" {
		t.Fatalf("extended header frame: %v %v", f, err)
	}
	f, err = ReadFrame(r, 0)
	f = unpooled(t, f)
	if err != nil || f.Channel != 5 || !reflect.DeepEqual(f.Body, tr) {
		t.Fatalf("transfer: %v %v", f, err)
	}
	f, err = ReadFrame(r, 0)
	if err != nil || f.Type != FrameTypeSASL {
		t.Fatalf("sasl: %v %v", f, err)
	}
	if _, err := ReadFrame(r, 0); err != io.EOF {
		t.Fatalf("end of stream: %v", err)
	}

	// ParseFrame walks the same stream.
	var bodies int
	for data := stream; len(data) > 0; {
		_, n, err := ParseFrame(data, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := ParseFrame(data[:n-1], 0); !errors.Is(err, ErrIncomplete) {
			t.Fatalf("short frame: %v", err)
		}
		data = data[n:]
		bodies++
	}
	if bodies != 4 {
		t.Fatalf("%d frames", bodies)
	}

	// Truncation anywhere is an unexpected EOF; too large is refused.
	for _, cut := range []int{3, HeaderSize + 2, len(ext) - 1} {
		_, err := ReadFrame(bufio.NewReader(bytes.NewReader(append(AppendEmptyFrame(nil), ext[:cut]...))), 0)
		if err != nil {
			t.Fatalf("heartbeat before cut: %v", err)
		}
		r := bufio.NewReader(bytes.NewReader(ext[:cut]))
		if _, err := ReadFrame(r, 0); err != io.ErrUnexpectedEOF {
			t.Fatalf("cut at %d: %v", cut, err)
		}
	}
	// A huge declared size with few bytes behind it fails without
	// allocating the declared size.
	huge := []byte{0xff, 0xff, 0xff, 0xf0, 2, 0, 0, 0, 1, 2, 3}
	if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(huge)), 0); err != io.ErrUnexpectedEOF {
		t.Fatalf("huge frame: %v", err)
	}
	// Bodies over the growth step are read whole.
	large := appendFrame(t, 0, &Transfer{Handle: 0, Payload: make([]byte, 3<<20+5)})
	if f, err := ReadFrame(bufio.NewReader(bytes.NewReader(large)), 0); err != nil || len(f.Body.(*Transfer).Payload) != 3<<20+5 {
		t.Fatalf("large frame: %v", err)
	}
	big := appendFrame(t, 0, &Transfer{Handle: 0, Payload: make([]byte, 600)})
	if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(big)), 512); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("large frame: %v", err)
	}
}

func TestAppendFrameReusesBuffer(t *testing.T) {
	buf := make([]byte, 0, 4096)
	tr := &Transfer{Handle: 1, DeliveryID: Ptr[uint32](1), DeliveryTag: make([]byte, 16), MessageFormat: Ptr[uint32](0),
		State: &Accepted{}, Payload: make([]byte, 1024)}
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		buf, err = AppendFrame(buf[:0], 1, tr)
		if err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per transfer frame", allocs)
	}
	d := &Disposition{Role: RoleReceiver, First: 1, Settled: true, State: &Accepted{}}
	f := &Flow{IncomingWindow: 1, NextOutgoingID: 1, OutgoingWindow: 1, Handle: Ptr[uint32](0), LinkCredit: Ptr[uint32](10)}
	allocs = testing.AllocsPerRun(100, func() {
		buf, _ = AppendFrame(buf[:0], 1, d)
		buf, _ = AppendFrame(buf[:0], 1, f)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per disposition+flow frame", allocs)
	}
}

// TestParseBodyAllocations: the performatives of the hot path — a
// transfer, a disposition, a flow — each cost ParseBody one allocation,
// their optional uint fields included: a Reader that escaped (through the
// generic map readers) or a uint per pointer field would cost more.
func TestParseBodyAllocations(t *testing.T) {
	for _, body := range []Body{
		&Transfer{Handle: 1, DeliveryID: Ptr[uint32](7), DeliveryTag: make([]byte, 16), MessageFormat: Ptr[uint32](0), Payload: make([]byte, 64)},
		&Disposition{Role: RoleReceiver, First: 1, Last: Ptr[uint32](9), Settled: true, State: &Accepted{}},
		&Flow{NextIncomingID: Ptr[uint32](1), IncomingWindow: 1, NextOutgoingID: 1, OutgoingWindow: 1,
			Handle: Ptr[uint32](0), DeliveryCount: Ptr[uint32](3), LinkCredit: Ptr[uint32](10), Available: Ptr[uint32](2)},
	} {
		frame, err := AppendFrame(nil, 1, body)
		if err != nil {
			t.Fatal(err)
		}
		data := frame[8:]
		got, err := ParseBody(data)
		if err != nil || !reflect.DeepEqual(got, body) {
			t.Fatalf("ParseBody = %v, %v; want %v", got, err, body)
		}
		if allocs := testing.AllocsPerRun(100, func() { _, _ = ParseBody(data) }); allocs != 1 {
			t.Errorf("%T: %v allocations per ParseBody, want 1", body, allocs)
		}
	}
}

func TestAppendFrameError(t *testing.T) {
	prefix := []byte("keep")
	p, err := AppendFrame(prefix, 0, &Open{ContainerID: "c", Properties: map[Symbol]any{"bad": struct{}{}}})
	if err == nil || !bytes.Equal(p, prefix) {
		t.Fatalf("got % x, %v", p, err)
	}
}

func TestStrings(t *testing.T) {
	for _, b := range fullBodies() {
		if s := b.String(); s == "" {
			t.Errorf("%T has empty String", b)
		}
	}
	for _, b := range []Body{&Begin{}, &Attach{}, &Flow{}, &Transfer{}, &Disposition{}} {
		_ = b.String()
	}
	if (&Error{Condition: "a", Description: "b"}).Error() != "a: b" || (&Error{Condition: "a"}).Error() != "a" {
		t.Error("Error.Error")
	}
	var nilErr *Error
	var nilSource *Source
	var nilTarget *Target
	var nilCoord *Coordinator
	if nilErr.String() != "<nil>" || nilSource.String() != "<nil>" || nilTarget.String() != "<nil>" || nilCoord.String() != "<nil>" {
		t.Error("nil Strings")
	}
	if RoleReceiver.String() != "receiver" || SenderSettleModeMixed.String() != "mixed" || ReceiverSettleModeSecond.String() != "second" ||
		SenderSettleMode(9).String() == "" || ReceiverSettleMode(9).String() == "" {
		t.Error("enum Strings")
	}
}

// unpooled checks that a transfer ReadFrame read into a pooled Buffer
// keeps its payload and tag inside that buffer, then drops the buffer
// from the frame so that it compares equal to ParseFrame's.
func unpooled(t *testing.T, f Frame) Frame {
	t.Helper()
	tr, ok := f.Body.(*Transfer)
	if !ok || tr.Buf == nil {
		return f
	}
	within := func(p []byte) bool {
		if len(p) == 0 {
			return true
		}
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(tr.Buf.b)))
		at := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
		return at >= lo && at+uintptr(len(p)) <= lo+uintptr(len(tr.Buf.b))
	}
	if !within(tr.Payload) || !within(tr.DeliveryTag) {
		t.Fatalf("transfer read into a pooled buffer has bytes outside it")
	}
	c := *tr
	c.Buf = nil
	f.Body = &c
	return f
}

func TestBufferClasses(t *testing.T) {
	if got := 1 << (minPooledClass + pooledClasses - 1); got != MaxPooledBody {
		t.Fatalf("largest class %d, MaxPooledBody %d", got, MaxPooledBody)
	}
	for _, n := range []int{1, 511, 512, 513, 1100, 4096, 4097, 65535, MaxPooledBody} {
		b := getBuffer(n)
		if len(b.b) != n || cap(b.b) < n || cap(b.b) > max(2*n, 512) {
			t.Fatalf("getBuffer(%d): len %d cap %d", n, len(b.b), cap(b.b))
		}
		b.Release()
		if b2 := getBuffer(n); len(b2.b) != n || cap(b2.b) < n {
			t.Fatalf("getBuffer(%d) after a release: len %d cap %d", n, len(b2.b), cap(b2.b))
		}
	}
	var nilBuf *Buffer
	nilBuf.Release()
}

// Reassembly buffers come back from a release (not from a sync.Pool a
// collection empties), and a full free list drops the extra ones.
func TestReassemblyBuffers(t *testing.T) {
	b := GetReassembly()
	if len(b.Bytes()) != 0 || cap(b.Bytes()) != ReassemblyCap {
		t.Fatalf("GetReassembly: len %d cap %d", len(b.Bytes()), cap(b.Bytes()))
	}
	b.b = append(b.b, "frame one, frame two"...)
	b.Release()
	runtime.GC()
	runtime.GC()
	found := false
	var held []*Buffer
	for range cap(reassembly) + 1 {
		g := GetReassembly()
		found = found || g == b
		if len(g.Bytes()) != 0 {
			t.Fatalf("a released reassembly buffer came back with length %d", len(g.Bytes()))
		}
		held = append(held, g)
	}
	if !found {
		t.Fatal("a released reassembly buffer was not handed out again after two collections")
	}
	for _, g := range held {
		g.Release() // one more than the free list holds: no block, no panic
	}
	if n := len(reassembly); n != cap(reassembly) {
		t.Fatalf("free list holds %d, want %d", n, cap(reassembly))
	}
}

// TestReadFramePools: transfers up to MaxPooledBody are read into a pooled
// buffer; larger ones and other performatives are not.
func TestReadFramePools(t *testing.T) {
	var stream []byte
	small := &Transfer{Handle: 1, DeliveryID: Ptr[uint32](1), DeliveryTag: []byte{1, 2}, Payload: bytes.Repeat([]byte("s"), 1000)}
	big := &Transfer{Handle: 1, DeliveryID: Ptr[uint32](2), DeliveryTag: []byte{3}, Payload: bytes.Repeat([]byte("b"), MaxPooledBody)}
	stream = append(stream, appendFrame(t, 0, small)...)
	stream = append(stream, appendFrame(t, 0, big)...)
	stream = append(stream, appendFrame(t, 0, &Flow{NextIncomingID: Ptr[uint32](1), IncomingWindow: 1, OutgoingWindow: 1})...)
	r := bufio.NewReader(bytes.NewReader(stream))
	f, err := ReadFrame(r, 0)
	if err != nil || f.Body.(*Transfer).Buf == nil {
		t.Fatalf("small transfer: %v, pooled %v", err, f.Body.(*Transfer).Buf != nil)
	}
	if got := unpooled(t, f).Body; !reflect.DeepEqual(got, small) {
		t.Fatalf("small transfer read as %v", got)
	}
	f.Body.(*Transfer).Buf.Release()
	f, err = ReadFrame(r, 0)
	if err != nil || f.Body.(*Transfer).Buf != nil || !bytes.Equal(f.Body.(*Transfer).Payload, big.Payload) {
		t.Fatalf("big transfer: %v, pooled %v", err, f.Body.(*Transfer).Buf != nil)
	}
	if f, err = ReadFrame(r, 0); err != nil {
		t.Fatal(err)
	} else if _, ok := f.Body.(*Flow); !ok {
		t.Fatalf("flow read as %T", f.Body)
	}
}

// TestReadFramePeeksSmallFrames: a flow without properties and a
// disposition that is accepted or released are parsed where they lie in
// the reader's buffer (one allocation: the performative); frames that may
// alias their bytes — properties, a rejected state's error info — still
// get a buffer of their own, so refilling the reader leaves them intact.
func TestReadFramePeeksSmallFrames(t *testing.T) {
	accepted := &Disposition{Role: RoleReceiver, First: 4, Settled: true, State: &Accepted{}}
	flow := &Flow{NextIncomingID: Ptr[uint32](1), IncomingWindow: 5000, NextOutgoingID: 1, OutgoingWindow: 5000,
		Handle: Ptr[uint32](0), DeliveryCount: Ptr[uint32](7), LinkCredit: Ptr[uint32](200)}
	rejected := &Disposition{Role: RoleReceiver, First: 5, Settled: true,
		State: &Rejected{Error: &Error{Condition: "c", Info: map[Symbol]any{"k": []byte("value")}}}}
	withProps := &Flow{IncomingWindow: 1, OutgoingWindow: 1, Properties: map[Symbol]any{"p": []byte("prop")}}
	filler := appendFrame(t, 0, &Flow{IncomingWindow: 9, OutgoingWindow: 9, Properties: map[Symbol]any{"p": []byte("XXXX")}})
	for _, want := range []Body{accepted, flow, rejected, withProps} {
		stream := appendFrame(t, 0, want)
		for range 300 { // more than the reader's buffer: it is refilled
			stream = append(stream, filler...)
		}
		r := bufio.NewReaderSize(bytes.NewReader(stream), 4096)
		f, err := ReadFrame(r, 0)
		if err != nil {
			t.Fatal(err)
		}
		for range 300 {
			if _, err := ReadFrame(r, 0); err != nil {
				t.Fatal(err)
			}
		}
		if !reflect.DeepEqual(f.Body, want) {
			t.Errorf("read %v; want %v", f.Body, want)
		}
	}

	for _, b := range []Body{accepted, flow} {
		frame := appendFrame(t, 0, b)
		src := bytes.NewReader(nil)
		r := bufio.NewReaderSize(src, 4096)
		if n := testing.AllocsPerRun(100, func() {
			src.Reset(frame)
			r.Reset(src)
			if _, err := ReadFrame(r, 0); err != nil {
				t.Fatal(err)
			}
		}); n != 1 {
			t.Errorf("%T: %v allocations per ReadFrame, want 1", b, n)
		}
	}
}
