//go:build busbar_nofence

package pgstore

const noFence = true
