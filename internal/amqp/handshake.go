package amqp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// The connection handshake is drawn in the package documentation
// (doc.go). It runs on the reader goroutine with a deadline of
// HandshakeTimeout and writes directly to the socket; the writer goroutine
// starts after it.

var (
	errBadHeader  = errors.New("amqp: unsupported protocol header")
	errSASLFailed = errors.New("amqp: SASL authentication failed")
	errRefused    = errors.New("amqp: connection refused")
)

// saslMechanisms are offered in this order; clients take the first one
// they support.
var saslMechanisms = []frames.Symbol{
	frames.SASLMechanismMSSBCBS,
	frames.SASLMechanismAnonymous,
	frames.SASLMechanismPlain,
}

// handshake negotiates the protocol, SASL and open. With refuse set the
// client gets open then close(amqp:resource-limit-exceeded).
func (c *Conn) handshake(refuse bool) error {
	c.peerOpen = &frames.Open{}
	c.rd.deadline = time.Now().Add(c.cfg.HandshakeTimeout)

	hdr, err := c.readProtoHeader()
	if err != nil {
		return err
	}
	switch {
	case hdr == frames.ProtocolHeaderSASL:
		if err := c.writeRaw([]byte(frames.ProtocolHeaderSASL)); err != nil {
			return err
		}
		if err := c.saslExchange(); err != nil {
			return err
		}
		if hdr, err = c.readProtoHeader(); err != nil {
			return err
		}
		if hdr != frames.ProtocolHeaderAMQP {
			return c.badHeader(hdr, frames.ProtocolHeaderAMQP)
		}
	case hdr == frames.ProtocolHeaderAMQP && !c.cfg.SASL.RequireSASL:
		// No SASL: authorisation happens through CBS only.
	default:
		return c.badHeader(hdr, frames.ProtocolHeaderSASL)
	}
	if err := c.writeRaw([]byte(frames.ProtocolHeaderAMQP)); err != nil {
		return err
	}

	fr, err := frames.ReadFrame(c.br, c.cfg.MaxFrameSize)
	if err != nil {
		if c.rd.err != nil {
			return err
		}
		cond := CondDecodeError
		if errors.Is(err, frames.ErrInvalidHeader) || errors.Is(err, frames.ErrFrameTooLarge) {
			cond = CondFramingError
		}
		return c.refuseOpen(Errorf(cond, "%v", err))
	}
	open, ok := fr.Body.(*frames.Open)
	if !ok || fr.Type != frames.FrameTypeAMQP {
		return c.refuseOpen(Errorf(CondNotAllowed, "expected open, got %v", fr.Body))
	}
	if open.MaxFrameSize < frames.MinMaxFrameSize {
		return c.refuseOpen(Errorf(CondInvalidField, "max-frame-size %d below %d", open.MaxFrameSize, frames.MinMaxFrameSize))
	}
	c.peerOpen = open
	c.maxOutFrame = min(open.MaxFrameSize, c.cfg.MaxFrameSize)
	c.channelMax = c.cfg.ChannelMax
	c.handleMax = ^uint32(0) - 1
	if c.cfg.MaxLinks > 0 {
		c.handleMax = uint32(c.cfg.MaxLinks - 1)
	}
	if refuse {
		return c.refuseOpen(Errorf(CondResourceLimitExceeded, "connection limit of %d reached", c.cfg.MaxConnections))
	}
	h, err := c.srv.handler.Connect(c)
	if err != nil {
		return c.refuseOpen(asError(err))
	}
	c.handler = h

	if err := c.writeOpen(); err != nil {
		return err
	}
	if peer := time.Duration(open.IdleTimeOut) * time.Millisecond; peer > 0 {
		// Well inside the client's time-out, but not so often that a
		// client asking for a tiny one makes us spin.
		c.w.heartbeat = max(min(peer/2, maxHeartbeatInterval), minHeartbeatInterval)
	}
	c.rd.idle = 2 * c.cfg.IdleTimeout
	c.rd.deadline = time.Time{}
	c.startWriter()
	c.startAuthTimer()
	c.log.Debug("connection opened", "container", open.ContainerID, "hostname", open.Hostname,
		"sasl", c.saslMechanism, "max-frame-size", open.MaxFrameSize, "idle-time-out", open.IdleTimeOut)
	return nil
}

func (c *Conn) startWriter() {
	c.writerStarted = true
	go c.w.run()
}

// refuseOpen answers the client's open with our open and a close carrying
// e, and returns an error so that the handshake ends.
func (c *Conn) refuseOpen(e *Error) error {
	if err := c.writeOpen(); err != nil {
		return err
	}
	c.startWriter()
	c.fail(e)
	return errRefused
}

func (c *Conn) writeOpen() error {
	o := &frames.Open{
		ContainerID:  c.cfg.ContainerID,
		MaxFrameSize: c.cfg.MaxFrameSize,
		ChannelMax:   c.cfg.ChannelMax,
		IdleTimeOut:  uint32(c.cfg.IdleTimeout / time.Millisecond),
	}
	if err := c.writeDirect(o); err != nil {
		return err
	}
	c.openSent.Store(true)
	return nil
}

// badHeader answers an unsupported protocol header with the one we want
// and ends the connection (part 2 section 2.2).
func (c *Conn) badHeader(got, want string) error {
	_ = c.writeRaw([]byte(want))
	c.linger = true
	return fmt.Errorf("%w: %q", errBadHeader, got)
}

func (c *Conn) readProtoHeader() (string, error) {
	var b [8]byte
	if _, err := io.ReadFull(c.br, b[:]); err != nil {
		return "", err
	}
	return string(b[:]), nil
}

func (c *Conn) writeRaw(b []byte) error {
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.cfg.WriteTimeout))
	_, err := c.nc.Write(b)
	return err
}

func (c *Conn) writeDirect(body frames.Body) error {
	b, err := frames.AppendFrame(nil, 0, body)
	if err != nil {
		return err
	}
	return c.writeRaw(b)
}

// saslExchange offers the mechanisms and checks the client's choice.
// ANONYMOUS and MSSBCBS always succeed (Service Bus authorises through
// CBS afterwards) unless SASLConfig.PlainOnly; PLAIN goes through
// SASLConfig.CheckPlain or ValidatePlain.
func (c *Conn) saslExchange() error {
	offer := saslMechanisms
	if c.cfg.SASL.PlainOnly {
		offer = []frames.Symbol{frames.SASLMechanismPlain}
	}
	if err := c.writeDirect(&frames.SASLMechanisms{Mechanisms: offer}); err != nil {
		return err
	}
	fr, err := frames.ReadFrame(c.br, c.cfg.MaxFrameSize)
	if err != nil {
		return err
	}
	init, ok := fr.Body.(*frames.SASLInit)
	if !ok {
		_ = c.writeDirect(&frames.SASLOutcome{Code: frames.SASLCodeSysPerm})
		c.linger = true
		return fmt.Errorf("%w: expected sasl-init, got %v", errSASLFailed, fr.Body)
	}
	code := frames.SASLCodeOK
	switch init.Mechanism {
	case frames.SASLMechanismAnonymous, frames.SASLMechanismMSSBCBS:
		if c.cfg.SASL.PlainOnly {
			code = frames.SASLCodeAuth
		}
	case frames.SASLMechanismPlain:
		user, pass, ok := parsePlain(init.InitialResponse)
		var err error
		switch {
		case !ok:
			code = frames.SASLCodeAuth
		case c.cfg.SASL.CheckPlain != nil:
			if c.saslInfo, err = c.cfg.SASL.CheckPlain(user, pass); err != nil {
				code = frames.SASLCodeAuth
			}
		case c.cfg.SASL.ValidatePlain != nil && c.cfg.SASL.ValidatePlain(user, pass) != nil:
			code = frames.SASLCodeAuth
		}
		if code == frames.SASLCodeOK {
			c.saslUser = user
		}
		if code == frames.SASLCodeOK && (c.cfg.SASL.ValidatePlain != nil || c.cfg.SASL.CheckPlain != nil) {
			defer c.Authenticated() // after the outcome is written
		}
	default:
		code = frames.SASLCodeAuth
	}
	if err := c.writeDirect(&frames.SASLOutcome{Code: code}); err != nil {
		return err
	}
	if code != frames.SASLCodeOK {
		c.linger = true
		return fmt.Errorf("%w: mechanism %s", errSASLFailed, init.Mechanism)
	}
	c.saslMechanism = init.Mechanism
	return nil
}

// parsePlain splits a PLAIN initial response, [authzid] NUL authcid NUL
// passwd (RFC 4616).
func parsePlain(resp []byte) (user, pass string, ok bool) {
	parts := bytes.Split(resp, []byte{0})
	if len(parts) != 3 || len(parts[1]) == 0 {
		return "", "", false
	}
	return string(parts[1]), string(parts[2]), true
}
