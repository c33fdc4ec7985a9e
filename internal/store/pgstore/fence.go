//go:build !busbar_nofence

package pgstore

// noFence leaves the fence statement out of every transaction. Only the
// busbar_nofence build sets it, to show that the fencing test fails
// without the fence.
const noFence = false
