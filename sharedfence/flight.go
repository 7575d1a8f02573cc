package sharedfence

import (
	"time"

	"github.com/fencegate/fencegate"
)

// Flight is the part of a shared fence's permit that bounds its write's
// forward: a replica that is found gone is waited out by the other
// replicas' drains for its forward timeout, counted from before the
// write's marker read, so the write must end within it (docs/design.md
// §4, "Forward bound").
type Flight struct {
	Resource string
	// Abort is the write's gateway.Write.Abort (nil: no forward to cut).
	Abort func(cause error)
	// BodySent is the write's gateway.Write.BodySent (nil: sent whole).
	BodySent func() bool
	// Start is when the write's marker read was queued.
	Start time.Time
	timer *time.Timer
}

// Arm aborts the write with a fencegate.ForwardTimeoutError once timeout
// has passed since Start. Call it once, before the permit is handed out.
func (fl *Flight) Arm(timeout time.Duration) {
	if fl.Abort == nil {
		return
	}
	abort := fl.Abort
	fl.timer = time.AfterFunc(timeout-time.Since(fl.Start), func() {
		abort(&fencegate.ForwardTimeoutError{Timeout: timeout})
	})
}

// Stop disarms the forward bound (the write ended).
func (fl *Flight) Stop() {
	if fl.timer != nil {
		fl.timer.Stop()
	}
}

// Lost aborts the write: its replica's marker session (or lease) is
// lost, so its marker may be gone and other replicas' drains wait only
// for its forward timeout. err says how it was lost.
func (fl *Flight) Lost(err error) {
	if fl.Abort != nil {
		fl.Abort(&fencegate.SessionLostError{Resource: fl.Resource, Err: err})
	}
}

// Live is the write's gateway.LivePermit check against its forward bound:
// nil while timeout has not passed since Start.
func (fl *Flight) Live(timeout time.Duration) error {
	if time.Since(fl.Start) > timeout {
		return &fencegate.ForwardTimeoutError{Timeout: timeout}
	}
	return nil
}

// MayLandUntil is when a write cut off with its replica's session stops
// being able to land: a write whose request went out whole (or that
// cannot be aborted) may be applied by the upstream whatever becomes of
// its connection, until its forward bound has passed; one whose request
// had not gone out whole is never applied once aborted (zero time).
func (fl *Flight) MayLandUntil(timeout time.Duration) time.Time {
	if fl.Abort == nil || fl.BodySent == nil || fl.BodySent() {
		return fl.Start.Add(timeout)
	}
	return time.Time{}
}
