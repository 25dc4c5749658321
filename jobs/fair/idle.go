package fair

import "slices"

// Idle is a process's runners waiting for work, oldest first, and what a
// wake-up (Wake) does to them: it wakes the runner that has waited
// longest; with none waiting, WakeOne is kept for the next runner that
// would wait, which then does not (at most one kept for each of the
// process's Runners) — a conversation that became due between a runner's
// look and its wait is not lost, and one notification wakes one runner,
// not the herd. jobs/scheduler.go keeps one for its runners, the
// simulation one for its own.
type Idle[R comparable] struct {
	// Runners is how many runners the process keeps.
	Runners int
	waiting []R
	kept    int
}

// Wake carries out w: r is the runner to wake (ok), taken off the
// waiting list.
func (i *Idle[R]) Wake(w Wake) (r R, ok bool) {
	switch {
	case w == WakeNone:
	case len(i.waiting) > 0:
		r, i.waiting = i.waiting[0], i.waiting[1:]
		return r, true
	case w == WakeOne:
		i.kept = min(i.kept+1, i.Runners)
	}
	return r, false
}

// Kept takes a wake-up kept for the next runner that would wait, if
// there is one: that runner looks again instead of waiting.
func (i *Idle[R]) Kept() bool {
	if i.kept == 0 {
		return false
	}
	i.kept--
	return true
}

// Wait puts r on the waiting list, last.
func (i *Idle[R]) Wait(r R) { i.waiting = append(i.waiting, r) }

// Leave takes r off the waiting list (its wait ended otherwise: a timer,
// a cancel); false when a wake-up took it off already.
func (i *Idle[R]) Leave(r R) bool {
	k := slices.Index(i.waiting, r)
	if k < 0 {
		return false
	}
	i.waiting = slices.Delete(i.waiting, k, k+1)
	return true
}

// All takes every waiting runner off the list, to be woken, and keeps a
// wake-up for each of the process's runners (one that is about to wait
// may have missed what they are woken for).
func (i *Idle[R]) All() []R {
	w := i.waiting
	i.waiting, i.kept = nil, i.Runners
	return w
}
