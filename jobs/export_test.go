package jobs

import (
	"context"
	"time"

	"github.com/riverqueue/river"
)

// DeliverEvents runs one event-delivery job for a stream (conversation 0:
// the tenant's own), as River would.
func DeliverEvents(ctx context.Context, r *Runner, tenant, conversation int64) error {
	return r.events.Work(ctx, &river.Job[EventsArgs]{Args: EventsArgs{Tenant: tenant, Conversation: conversation}})
}

// SetHooks lets tests force interleavings in a runner's drains.
func SetHooks(r *Runner, beforeFinish func(conv int64), afterEffect func(stepID int64)) {
	r.drainer.hooks = hooks{beforeFinish: beforeFinish, afterEffect: afterEffect}
}

// SetBeforeEffect sets the hook that runs once a step's attempt is recorded
// as running and before its external call.
func SetBeforeEffect(r *Runner, f func(stepID int64)) { r.drainer.hooks.beforeEffect = f }

// SetBeforeWait sets the hook that runs when a drain found its tenant's
// handler, number or sending away and is about to mark its conversation
// waiting for it.
func SetBeforeWait(r *Runner, f func(conv int64)) { r.drainer.hooks.beforeWait = f }

// SetCheckHook sets the hook that runs when a drain checks an outbound
// message (by its row's id) against WhatsApp's schema: one accepted
// through SQL, unchecked.
func SetCheckHook(r *Runner, f func(messagePK int64)) { r.drainer.hooks.checked = f }

// SetReplyHooks sets the hooks that run when a drain is about to park a
// conversation whose async handler has not posted its replies yet
// (awaiting), and when it is about to dead-letter one past its deadline
// (beforeExpire).
func SetReplyHooks(r *Runner, awaiting, beforeExpire func(stepID int64)) {
	r.drainer.hooks.awaitingReplies = awaiting
	r.drainer.hooks.beforeExpire = beforeExpire
}

// Claims returns how many claims r's runners made, and how many of them
// found nothing to take.
func Claims(r *Runner) (claims, empty int64) { return r.claims.Load(), r.claimsEmpty.Load() }

// Reads returns how many times r's scheduler read the ready set's summary.
func Reads(r *Runner) int64 { return r.sched.reads.Load() }

// TenantWaiting reports whether r's scheduler knows tenant has a
// conversation that became due and has not had a worker since.
func TenantWaiting(r *Runner, tenant int64) bool {
	s := r.sched
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.WaitingTenant(tenant)
}

// Batches returns how many of r's claims took a batch of quiet
// conversations (batch.go).
func Batches(r *Runner) int64 { return r.batches.Load() }

// AloneClaims returns how many of r's claims took one conversation for a
// drain of its own (not a batch, not empty).
func AloneClaims(r *Runner) int64 { return r.claims.Load() - r.batches.Load() - r.claimsEmpty.Load() }

// NoOverdraft keeps r's runners within Config.Workers even for a tenant
// with nothing running (no overdraft), for tests of what a waiting tenant
// gets when no runner may go beyond the room.
func NoOverdraft(r *Runner) {
	r.sched.mu.Lock()
	defer r.sched.mu.Unlock()
	r.sched.room.Over = 0
}

// DependencyArgs returns what a drain passes ordo.dependency_failed for
// the tenant's "handler" or "number" after the tenant, step, probe,
// reason and immediate: the dependency's name, its evidence rule and its
// probes' cap (ms).
func DependencyArgs(what string) []any {
	d := handlerDep
	if what == numberDep.what {
		d = numberDep
	}
	return []any{d.what, d.rule.failures, d.rule.distinct, d.rule.span.Milliseconds(), d.rule.horizon.Milliseconds(), d.probeMax.Milliseconds()}
}

// EvidenceCase is one row of a dependency's evidence rule table, for the
// test that holds ordo.dependency_failed to it:
// failures of Steps at offsets At with OK successful calls so far, and the
// verdict after each.
type EvidenceCase struct {
	Name  string
	Steps []int64
	At    []time.Duration
	OK    []int64
	Want  []string
}

// NumberCases and HandlerCases return the rules' tables (evidence_test.go).
func NumberCases() []EvidenceCase  { return exportCases(numberCases) }
func HandlerCases() []EvidenceCase { return exportCases(handlerCases) }

func exportCases(cases []evidenceCase) []EvidenceCase {
	var out []EvidenceCase
	for _, c := range cases {
		nc := EvidenceCase{Name: c.name}
		for i, ev := range c.events {
			nc.Steps, nc.At, nc.OK = append(nc.Steps, ev.step), append(nc.At, ev.at), append(nc.OK, ev.ok)
			nc.Want = append(nc.Want, c.want[i].String())
		}
		out = append(out, nc)
	}
	return out
}
