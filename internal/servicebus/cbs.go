package servicebus

import (
	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// cbsRequest serves a $cbs request (amqp-wire §2.2-§2.4). put-token
// validates the token for the audience in "name": 401 for a bad token,
// 404 with the cloud's "could not be found" text when the audience names
// an entity that does not exist (the only way the Go SDK reports
// CodeNotFound, §0.13), else 202 and the grant is recorded for the
// connection. The optional "expiration" property is ignored: the token's
// own se is authoritative.
func (c *conn) cbsRequest(req *frames.Message) *response {
	op := appProp(req, "operation")
	if op != "put-token" {
		return failed(c.fail("cbs", "", badRequest("The $cbs operation '%s' is not supported; only put-token is.", op)))
	}
	audience := appProp(req, "name")
	token, err := frames.BodyValue(req.RawBody)
	if err != nil {
		return failed(c.fail("put-token", audience, unauthorized("The put-token request carries no token: %v", err)))
	}
	var tok string
	switch t := token.(type) {
	case string:
		tok = t
	case []byte:
		tok = string(t)
	default:
		return failed(c.fail("put-token", audience, unauthorized("The put-token request's token is a %T, not a string.", token)))
	}
	if typ := appProp(req, "type"); typ != "" && typ != "servicebus.windows.net:sastoken" {
		return failed(c.fail("put-token", audience, unauthorized("Token type '%s' is not supported; use a shared access signature (servicebus.windows.net:sastoken).", typ)))
	}
	g, err := c.h.auth.Validate(tok, audience)
	if err != nil {
		return failed(c.fail("put-token", audience, err))
	}
	if g.Audience != "" {
		a, err := parseAddress(g.Audience)
		if err == nil && a.kind != nodeCBS {
			if _, err := c.checkEntity(a); err != nil {
				return failed(c.fail("put-token", a.path(), err))
			}
		}
	}
	c.addGrant(g)
	c.c.Authenticated() // leaves the unauthenticated budget, stops the token deadline
	return &response{status: statusAccepted, desc: "Accepted"}
}
