package fair

import "time"

// Batch is one batch's run in a process (jobs/batch.go drains it; the
// simulation runs the same decisions, sim_batch_test.go): several of one
// tenant's conversations, one message of each sent at every round and
// recorded in one write. What it decides at a round's end — whether it
// goes on, whether the write refills it, how much room it keeps, whether
// it gathers — is decided here, with the model's view of its tenant.
type Batch struct {
	Tenant int64
	// Most is the most conversations a batch holds (BatchSize).
	Most int
	// Own is the room it holds: its conversations', and while the run
	// goes on, that of those that left, for a refill to use.
	Own     int
	Started time.Time
	Round   int
	// Gathering is since when it gathers (Gather); zero: it does not.
	Gathering time.Time
}

// RunLimits bound a drain's run and a batch's alike (MaxMessagesPerRun,
// MaxRunTime): messages, or rounds, and time.
type RunLimits struct {
	Rounds int
	Time   time.Duration
}

// StartBatch records that b's claim took b.Own conversations at now, and
// another was due behind them or not (more): while the batch has room for
// more and its tenant is alone here, it gathers — the tenant's
// conversations that become due join it at its next round instead of
// being claimed by other runners in batches of their own; the round
// counts its conversations (Took) before PassOn says whether the tenant
// stays in it. With more, free runners want room for half a batch for a
// while (Want).
func (s *Scheduler) StartBatch(now time.Time, b *Batch, more bool) Wake {
	b.Started = now
	if more {
		s.backlogAt = now
	}
	s.gather(now, b, b.Own < b.Most && s.Alone(now, b.Tenant))
	s.Took(b.Tenant, b.Own)
	return s.PassOn(now, b.Tenant, more)
}

// GoesOn says whether b runs another round after the one whose sends
// ended at now: as a drain at a message boundary, within its limits, and
// past its turn slice only while its tenant is alone here and no tenant
// waits (HandOff, which promises the worker to one that does): the
// workers go by the round's weights, which count its conversations. A
// small batch gathering beside another of its tenant ends too, so that the
// other takes its room (Merge).
func (s *Scheduler) GoesOn(now time.Time, b *Batch, l RunLimits) bool {
	ran := now.Sub(b.Started)
	return b.Round+1 < l.Rounds && ran <= l.Time &&
		(ran < s.cfg.Slice || s.Alone(now, b.Tenant) && !s.HandOff(now, b.Tenant)) &&
		!(!b.Gathering.IsZero() && s.Merge(b.Tenant, b.Own, b.Most))
}

// DrainGoesOn says whether a drain of tenant alone in its run (one
// conversation: jobs/drain.go; the simulation runs the same decision),
// started at started, goes on at now to its message number next (from
// 0): within its limits, and past its turn slice only while no tenant
// with nothing running here waits for a worker — HandOff promises the
// drain's worker to the one that waited longest. A batch goes on past
// its slice only while its tenant is alone here (GoesOn): its round
// shares the workers by weight, counting its conversations.
func (s *Scheduler) DrainGoesOn(now time.Time, tenant int64, started time.Time, next int, l RunLimits) bool {
	ran := now.Sub(started)
	return next < l.Rounds && ran <= l.Time && (ran < s.cfg.Slice || !s.HandOff(now, tenant))
}

// Refills says whether the write of b's round that goes on (goOn, and
// nothing failed that must be ended first) also claims more of its
// tenant's conversations: only while the tenant is alone here. The caller
// then grabs free room for it: fewer, fuller batches cost less per
// message.
func (s *Scheduler) Refills(now time.Time, b *Batch, goOn bool) bool {
	return goOn && s.Alone(now, b.Tenant)
}

// Surplus is the room b gives back after its round's write, which left it
// next conversations and alone to end one at a time: room beyond them is
// kept for a refill only while the run goes on and refills (refilled: the
// write tried) and nothing is ended alone (one may wait for an import's
// row lock).
func (b *Batch) Surplus(next, alone int, goOn, refilled bool) int {
	surplus := b.Own - next - alone
	if surplus > 0 && (alone > 0 || next == 0 || !goOn || !refilled) {
		return surplus
	}
	return 0
}

// RoundDone records that b's round ended at now with next conversations
// for the next round: their messages count as the tenant's visits (Sent),
// and b gathers from the next round's start while it refills, has room,
// nothing was ended alone and its tenant is alone — not when the refill
// was blocked (offered conversations, it took none: one needs a drain of
// its own first in line, and a claim must go to it).
func (s *Scheduler) RoundDone(now time.Time, b *Batch, next, alone int, refilled, blocked bool) Wake {
	b.Round++
	s.Sent(b.Tenant, next)
	return s.gather(now, b, next > 0 && refilled && !blocked && alone == 0 && b.Own < b.Most && s.Alone(now, b.Tenant))
}

// EndBatch records that b's run ended at now.
func (s *Scheduler) EndBatch(now time.Time, b *Batch) Wake { return s.gather(now, b, false) }

// gather is Gather for b, from a round's start.
func (s *Scheduler) gather(now time.Time, b *Batch, on bool) Wake {
	if !on && b.Gathering.IsZero() {
		return WakeNone
	}
	var w Wake
	b.Gathering, w = s.Gather(now, b.Tenant, on, b.Gathering)
	return w
}
