package cluster

import (
	"errors"
	"strconv"
)

// A wake message, the body a node sends to wake another (WakeSender):
// the unit ids in decimal, one space between two, nothing else, at most
// MaxWakeUnits of them:
//
//	"17 4294967298 4294967301"
//
// It is read by nodes that proved they hold the cluster secret only, but
// it is parsed strictly all the same.

// MaxWakeUnits is the most units one wake message names; MaxWakeBytes
// the longest message.
const (
	MaxWakeUnits = maxWakeUnits
	MaxWakeBytes = MaxWakeUnits*21 - 1 // 20 digits and a space each
)

// AppendWake appends the wake message of units to b.
func AppendWake(b []byte, units []uint64) []byte {
	for i, u := range units {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendUint(b, u, 10)
	}
	return b
}

// ParseWake reads a wake message.
func ParseWake(b []byte) ([]uint64, error) {
	if len(b) == 0 {
		return nil, errors.New("cluster: an empty wake message")
	}
	if len(b) > MaxWakeBytes {
		return nil, errors.New("cluster: a wake message longer than " + strconv.Itoa(MaxWakeBytes) + " bytes")
	}
	var units []uint64
	for start := 0; start <= len(b); {
		end := start
		for end < len(b) && b[end] != ' ' {
			if b[end] < '0' || b[end] > '9' {
				return nil, errors.New("cluster: a wake message holds something other than unit ids")
			}
			end++
		}
		if end == start || (end-start > 1 && b[start] == '0') {
			return nil, errors.New("cluster: a wake message with an empty or zero-padded unit id")
		}
		u, err := strconv.ParseUint(string(b[start:end]), 10, 64)
		if err != nil {
			return nil, errors.New("cluster: a wake message's unit id is out of range")
		}
		if len(units) == MaxWakeUnits {
			return nil, errors.New("cluster: a wake message naming more than " + strconv.Itoa(MaxWakeUnits) + " units")
		}
		units = append(units, u)
		start = end + 1
	}
	return units, nil
}
