package cli

import (
	"github.com/spf13/pflag"

	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// propSetter applies the property flags that were given to an admin
// client description, remembering the first error. Flags not given leave
// their property alone.
type propSetter struct {
	fs  *pflag.FlagSet
	err error
}

func (s *propSetter) given(flag string) bool {
	return s.err == nil && s.fs.Lookup(flag) != nil && s.fs.Changed(flag)
}

// duration sets an ISO 8601 duration property from a duration flag.
func (s *propSetter) duration(flag, val string, dst **string) {
	if s.given(flag) {
		*dst, s.err = isoDuration(flag, val)
	}
}

// str sets a string property; an empty value unsets it.
func (s *propSetter) str(flag, val string, dst **string) {
	if !s.given(flag) {
		return
	}
	if val == "" {
		*dst = nil
		return
	}
	*dst = &val
}

func (s *propSetter) boolean(flag string, val bool, dst **bool) {
	if s.given(flag) {
		*dst = &val
	}
}

// positive32 sets an int32 property that must be at least 1.
func (s *propSetter) positive32(flag string, val int32, dst **int32) {
	if !s.given(flag) {
		return
	}
	if val < 1 {
		s.err = usageErrorf("--%s must be at least 1", flag)
		return
	}
	*dst = &val
}

// positive64 sets an int64 property that must be at least 1.
func (s *propSetter) positive64(flag string, val int64, dst **int64) {
	if !s.given(flag) {
		return
	}
	if val < 1 {
		s.err = usageErrorf("--%s must be at least 1", flag)
		return
	}
	*dst = &val
}

func (s *propSetter) status(flag, val string, dst **sbadmin.EntityStatus) {
	if !s.given(flag) {
		return
	}
	st, ok := parseStatus(val)
	if !ok {
		s.err = usageErrorf("--%s: %q is not one of Active, Disabled, SendDisabled, ReceiveDisabled", flag, val)
		return
	}
	*dst = &st
}

// anyGiven reports whether any of the flags was given.
func anyGiven(fs *pflag.FlagSet, flags []string) bool {
	for _, name := range flags {
		if fs.Lookup(name) != nil && fs.Changed(name) {
			return true
		}
	}
	return false
}
