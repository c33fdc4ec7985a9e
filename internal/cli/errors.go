package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
	"github.com/spf13/cobra"
)

// Exit codes (see the package documentation).
const (
	ExitOK           = 0
	ExitFailure      = 1
	ExitUsage        = 2
	ExitNotFound     = 3
	ExitUnauthorized = 4
	ExitExists       = 5
)

// exitError is an error with the exit code it should end the process with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// ExitCode is the process exit code of e.
func (e *exitError) ExitCode() int { return e.code }

// ExitCode returns the exit code for an error returned by one of the
// commands: 0 for nil, the error's own code if it has one (any error in its
// chain with an ExitCode() int method), else 1.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var c interface{ ExitCode() int }
	if errors.As(err, &c) {
		return c.ExitCode()
	}
	return ExitFailure
}

// usageErrorf reports a mistake in the command line (exit code 2).
func usageErrorf(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// flagError is the FlagErrorFunc of every command: flag parsing errors are
// usage errors.
func flagError(cmd *cobra.Command, err error) error {
	//lint:ignore ST1005 printed as the command's last lines, with the usage hint as a sentence
	return &exitError{code: ExitUsage, err: fmt.Errorf("%w\nRun '%s --help' for usage.", err, cmd.CommandPath())}
}

// exactArgs is cobra.ExactArgs with usage errors that name the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s takes %s (got %d argument(s))\nUsage: %s", cmd.CommandPath(), names, len(args), cmd.UseLine())
		}
		return nil
	}
}

// rangeArgs accepts between lo and hi arguments.
func rangeArgs(lo, hi int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return usageErrorf("%s takes %s (got %d argument(s))\nUsage: %s", cmd.CommandPath(), names, len(args), cmd.UseLine())
		}
		return nil
	}
}

// entityError turns an error from the SDK into one a person can act on,
// with the exit code scripts can branch on. entity names what was being
// worked on ("queue \"orders\""), for the not-found message.
func entityError(err error, entity string) error {
	if err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	switch {
	case isNotFound(err) && isEntityNotFound(err):
		return &exitError{code: ExitNotFound, err: fmt.Errorf("%s not found", entity)}
	case isNotFound(err):
		return &exitError{code: ExitNotFound, err: &detailError{entity + ": " + detail(err), err}}
	case isUnauthorized(err):
		return &exitError{code: ExitUnauthorized, err: &detailError{"access denied (check the connection string's SharedAccessKeyName and SharedAccessKey): " + detail(err), err}}
	case isConflict(err):
		return &exitError{code: ExitExists, err: fmt.Errorf("%s already exists", entity)}
	case isConnRefused(err):
		return &detailError{"cannot reach the broker (is it running? see --connection-string and --admin): " + detail(err), err}
	}
	return &detailError{entity + ": " + detail(err), err}
}

// detailError replaces an SDK error's text, keeping the error in the chain.
type detailError struct {
	msg string
	err error
}

func (e *detailError) Error() string { return e.msg }
func (e *detailError) Unwrap() error { return e.err }

// detail is the part of an SDK error worth showing: the management API's
// <Detail>, an AMQP error's description, without the service's tracking
// suffix.
func detail(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return responseDetail(re)
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Description != "" {
		return trimTracking(ae.Description) + " (" + string(ae.Condition) + ")"
	}
	s := firstLine(err)
	// "(unauthorized): rpc: failed, status code 401 and description: …"
	if strings.HasPrefix(s, "(") {
		if i := strings.Index(s, "): "); i > 0 {
			s = s[i+3:]
		}
	}
	if _, after, ok := strings.Cut(s, "and description: "); ok {
		s = after
	}
	return trimTracking(s)
}

func trimTracking(s string) string {
	if i := strings.Index(s, " TrackingId:"); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// errNotFound stands for the nil, nil answer the admin client gives for
// an entity that does not exist.
var errNotFound = errors.New("not found")

func isNotFound(err error) bool {
	if errors.Is(err, errNotFound) {
		return true
	}
	var sb *azservicebus.Error
	if errors.As(err, &sb) && sb.Code == azservicebus.CodeNotFound {
		return true
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Condition == amqp.ErrCondNotFound {
		return true
	}
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound
}

// isEntityNotFound tells, of not-found errors, a missing entity from other
// 404 answers to AMQP management requests (a missing message, say): an
// admin API 404, a refused link, or the service's "The messaging entity
// '…' could not be found".
func isEntityNotFound(err error) bool {
	var re *azcore.ResponseError
	if errors.Is(err, errNotFound) || errors.As(err, &re) {
		return true // the management API addresses nothing but entities
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Condition == amqp.ErrCondNotFound {
		return true
	}
	return strings.Contains(err.Error(), "messaging entity")
}

func isUnauthorized(err error) bool {
	var sb *azservicebus.Error
	if errors.As(err, &sb) && sb.Code == azservicebus.CodeUnauthorizedAccess {
		return true
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Condition == amqp.ErrCondUnauthorizedAccess {
		return true
	}
	var re *azcore.ResponseError
	return errors.As(err, &re) && (re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden)
}

func isConflict(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusConflict
}

func isConnRefused(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	// azservicebus.Error does not unwrap.
	s := err.Error()
	return strings.Contains(s, "dial tcp") || strings.Contains(s, "connection refused")
}

// responseDetail is the <Detail> of a management API error body, without
// the service's SubCode prefix and tracking suffix, and the HTTP status.
func responseDetail(re *azcore.ResponseError) string {
	status := fmt.Sprintf("HTTP %d", re.StatusCode)
	// azcore has put the body into the error text.
	text := re.Error()
	i := strings.Index(text, "<Detail>")
	if i < 0 {
		return status
	}
	detail, _, ok := strings.Cut(text[i+len("<Detail>"):], "</Detail>")
	if !ok {
		return status
	}
	if j := strings.Index(detail, "SubCode="); j == 0 {
		if k := strings.Index(detail, ". "); k > 0 {
			detail = detail[k+2:]
		}
	}
	detail = xmlText.Replace(trimTracking(detail))
	return detail + " (" + status + ")"
}

var xmlText = strings.NewReplacer("&lt;", "<", "&gt;", ">", "&quot;", `"`, "&apos;", "'", "&#39;", "'", "&amp;", "&")

func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// isIdle reports whether err is the end of a wait bounded by a deadline
// derived from parent, rather than parent itself ending.
func isIdle(parent context.Context, err error) bool {
	return errors.Is(err, context.DeadlineExceeded) && parent.Err() == nil
}
