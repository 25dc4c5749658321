package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/jobs/fair"
	"github.com/ordo-dev/ordo/jobs/metrics"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/tenants"
)

// The batched drain. Drained one conversation at a time, each message of a
// conversation that has no more queued cost a claim transaction and a
// finish transaction of five statements each, more than its River job
// costs river-plain (issue 11, `make bench` spread). A runner whose turn
// falls on an unpaced, uncapped tenant therefore first claims up to
// Config.BatchSize of its due conversations whose next message is an
// outbound one not started yet, in one statement (ordo.claim: their
// locks, fences, ready rows and send steps), sends those messages at once,
// and records the round in one statement (ordo.finish), which starts
// each conversation's next message for the next round — each write behind
// its conversation's fence. Anything else — a failed send, a conversation
// whose row an import holds, a credential that cannot be read — is ended
// one conversation at a time by the drain's own code, on the same
// connection, which holds their locks. A conversation whose next message
// needs a full drain (inbound, a retry) is released due at once, and
// ordo.claim stops at the first such conversation of the tenant, so
// the tenant's order of due conversations holds; paced, paused and capped
// tenants go through the per-conversation drain.

// endBatchQuery ends a batch's lease once its last conversations were ended
// one at a time.
const endBatchQuery = `SELECT ordo.drain_lease(0)`

// batch is what one ordo.claim took: conversations of one tenant,
// each with its next message's send step started.
type batch struct {
	tenant       int64
	max          int
	convs        []batchConv
	credentialAt *time.Time // the tenant's WhatsApp credential's stamp
	more         bool       // another of the tenant's conversations was due behind the batch
}

// batchConv is one conversation of a batch and what became of its send.
type batchConv struct {
	conv, fence    int64
	conversationID string
	m              message
	st             step
	sent           bool // the send was made (e: what it did)
	e              effect
	recorded       bool // ordo.finish recorded it, or it was ended alone
}

// startedSend is conversation conv (fence, conversationID) with outbound
// message m, whose send step stepID the claim or the previous round's
// finish started (attempt 1, running).
func startedSend(conv, fence int64, conversationID string, m message, stepID int64) batchConv {
	m.direction = "outbound"
	return batchConv{conv: conv, fence: fence, conversationID: conversationID, m: m,
		st: step{id: stepID, kind: "send", status: "running", request: m.payload, attempts: 1, started: true}}
}

// drainBatch drains b's conversations in rounds: each round sends one
// message of every conversation at once and records the round in one write,
// which also starts the next message of each conversation that has one (an
// outbound message not started yet) for the next round, while the run is
// within its bounds (Config.MaxMessagesPerRun, MaxRunTime, TurnSlice when
// another tenant waits, a stop) — a drain's loop, set-based. A conversation
// leaves the batch when it caught up, when its next message needs a full
// drain (due again at once), or when its send failed (ended alone, as its
// own drain would). Its room is given back as it leaves; false when the
// connection cannot be used again (dropping it releases what it holds).
func (r *Runner) drainBatch(ctx context.Context, conn *pgxpool.Conn, b *batch, claimed time.Time, name string) bool {
	d := r.drainer
	// The run's decisions are the model's (fair.Batch): whether it goes
	// on, refills, keeps room, gathers.
	bm := &fair.Batch{Tenant: b.tenant, Most: r.cfg.BatchSize, Own: len(b.convs)}
	limits := fair.RunLimits{Rounds: d.cfg.MaxMessagesPerRun, Time: d.cfg.MaxRunTime}
	defer func() { r.sched.give(bm.Own) }()
	giveBack := func(n int) { bm.Own -= n; r.sched.give(n) }
	r.sched.startBatch(bm, b.more)
	defer r.sched.endBatch(bm)
	drains := d.cfg.Metrics.DrainStarted
	var done []func()
	defer func() {
		for _, f := range done {
			f()
		}
	}()
	for range b.convs {
		done = append(done, drains())
	}
	cred, haveCred := d.creds.get(b.tenant, b.credentialAt)
	if !haveCred {
		// Changed since it was cached: read once for the batch. A problem
		// with it is the drain's to settle (it pauses the tenant's sending).
		c, problem, err := (&run{d: d, tenant: tenants.Tenant{ID: b.tenant}, on: conn}).loadCredential(ctx)
		if err == nil && problem == "" {
			d.creds.put(b.tenant, b.credentialAt, c)
			cred, haveCred = c, true
		}
	}
	var pc *whatsapp.Credential // the batch's credential for those ended alone; nil: none
	if haveCred {
		pc = &cred
	}
	var (
		t      *tenants.Tenant                              // read for the first conversation ended alone
		l      = lease{length: d.cfg.Lease, heard: claimed} // the batch's, on conn
		active = b.convs
		ended  bool // the last write ended the batch's lease
	)
	for len(active) > 0 {
		if haveCred {
			r.sendRound(ctx, active, &cred, l.left())
		}
		goOn := !d.stopping.Load() && r.sched.goesOn(bm, limits)
		// What was sent is recorded even when the worker is being stopped.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		l.touch()
		// endOne ends c alone, as its own drain would.
		endOne := func(c *batchConv) bool {
			if t == nil {
				tt, err := d.tenants.ByID(rctx, b.tenant)
				if err != nil {
					d.logger.WarnContext(ctx, "batch: read tenant", slog.Int64("tenant_id", b.tenant), slog.String("error", err.Error()))
					return false
				}
				t = &tt
			}
			l.touch()
			if !r.endAlone(ctx, rctx, conn, b, c, *t, pc, name) {
				return false
			}
			c.recorded = true
			giveBack(1)
			return true
		}
		// Meta paused the tenant or throttled its number: that is recorded
		// first (the failed conversation ended alone pauses or slows the
		// number), and the batch ends with this round, so that none of the
		// others, released by the finish, is sent again before it.
		for i := range active {
			if c := &active[i]; stopsTheTenant(c.e.err) {
				goOn = false
				if !endOne(c) {
					cancel()
					return false
				}
			}
		}
		failed := 0 // to end alone after the finish
		for _, c := range active {
			if !c.recorded && (!c.sent || c.e.err != nil) {
				failed++
			}
		}
		var refill *batch
		if r.sched.refills(bm, goOn && haveCred && failed == 0) {
			refill = &batch{tenant: b.tenant}
			bm.Own += r.sched.grab(bm.Most-bm.Own, 1) // room freed meanwhile joins it
		}
		next, end, ok := r.finishRound(rctx, conn, active, goOn, bm.Own-failed, refill, &cred)
		ended = end
		if !ok {
			cancel()
			return false
		}
		if refill != nil && len(refill.convs) > 0 {
			r.sched.refilled(b.tenant, len(refill.convs))
			for range refill.convs {
				done = append(done, drains())
			}
			next = append(next, refill.convs...)
			ended = false
		}
		alone := 0
		for _, c := range active {
			if !c.recorded {
				alone++
			}
		}
		giveBack(bm.Surplus(len(next), alone, goOn, refill != nil))
		blocked := refill != nil && refill.max > 0 && len(refill.convs) == 0 // (fair.Scheduler.RoundDone)
		for i := range active {
			if c := &active[i]; !c.recorded && !endOne(c) {
				cancel()
				return false
			}
		}
		cancel()
		active = next
		r.sched.roundDone(bm, len(active), alone, refill != nil, blocked)
	}
	if !ended {
		if _, err := conn.Exec(context.WithoutCancel(ctx), endBatchQuery); err != nil {
			return false
		}
	}
	return true
}

// stopsTheTenant reports whether a send's error concerns every send of the
// tenant's number, not only its conversation's: Meta paused the account or
// throttled the number.
func stopsTheTenant(err error) bool {
	var f *failure
	return errors.As(err, &f) && (f.action == actPause || f.action == actThrottle)
}

// sendRound sends one message of each conversation at once, each call
// bounded by what is left of the batch's lease.
func (r *Runner) sendRound(ctx context.Context, active []batchConv, cred *whatsapp.Credential, left time.Duration) {
	d := r.drainer
	callCtx, cancel := context.WithTimeout(ctx, min(d.cfg.SendTimeout, left))
	defer cancel()
	var wg sync.WaitGroup
	for i := range active {
		c := &active[i]
		wg.Go(func() {
			if d.hooks.beforeEffect != nil {
				d.hooks.beforeEffect(c.st.id)
			}
			c.e, c.sent = (&run{d: d, conversationID: c.conversationID, cred: cred}).call(callCtx, c.m, &c.st), true
			if d.hooks.afterEffect != nil {
				d.hooks.afterEffect(c.st.id)
			}
		})
	}
	wg.Wait()
}

// finishRound records a round's successful sends in one write
// (ordo.finish) and returns the conversations that go on to a next
// round, with their next message started; end says the write ended the
// batch's lease. ok false: the connection is in an unknown state. A send it
// did not record is left for endAlone.
//
// With refill, the same write claims as many of the tenant's
// conversations as leave the batch (ordo.finish through ordo.claim):
// the batch stays full while the run goes on, instead of its room going to
// claims of one.
//
// held is the room the batch holds for the conversations the write records
// (its own and vacant room): a refill takes the room of those that leave,
// once they are at least half of it.
func (r *Runner) finishRound(ctx context.Context, conn *pgxpool.Conn, active []batchConv, goOn bool, held int, refill *batch, cred *whatsapp.Credential) (next []batchConv, end, ok bool) {
	d := r.drainer
	n := len(active)
	convs, fences, steps, msgs, seqs := make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
	pids, lasts := make([]string, 0, n), make([]bool, 0, n)
	byConv := make(map[int64]*batchConv, n)
	for i := range active {
		c := &active[i]
		if !c.sent || c.e.err != nil {
			continue
		}
		if d.hooks.beforeFinish != nil {
			d.hooks.beforeFinish(c.conv)
		}
		convs, fences, steps, msgs, seqs = append(convs, c.conv), append(fences, c.fence), append(steps, c.st.id), append(msgs, c.m.pk), append(seqs, c.m.seq)
		// Its message's last step: a batch holds outbound messages, one send each.
		pids, lasts = append(pids, *c.e.providerID), append(lasts, true)
		byConv[c.conv] = c
	}
	if len(convs) == 0 {
		return nil, false, true
	}
	last := len(convs) == n // no failure to end alone after this write
	pb := &pgx.Batch{}
	recorded, room := 0, 0
	lease := d.cfg.Lease.Milliseconds()
	then, after := thenRelease, (*int64)(nil)
	if goOn {
		then = thenSend
	}
	if last {
		var none int64 // the session's lease ends with a write that lets every conversation go
		after = &none
	}
	pb.Queue(finishQuery, convs, fences, steps, pids, msgs, seqs, lasts, nil, nil,
		then, after, held, cred.PhoneNumberID).Query(func(rows pgx.Rows) error {
		var (
			conv  int64
			since time.Duration
			nm    struct {
				pk, seq, step *int64
				id            *string
				payload       []byte
			}
		)
		// finished and released are not needed here: the write ended those.
		_, err := pgx.ForEachRow(rows, []any{&conv, nil, nil, &since, &nm.pk, &nm.id, &nm.seq, &nm.payload, &nm.step, &room}, func() error {
			c := byConv[conv]
			if c == nil {
				return fmt.Errorf("batch: finish returned conversation %d, not in the round", conv)
			}
			recorded++
			c.recorded = true
			d.cfg.Metrics.Step("send", metrics.StepDone)
			d.cfg.Metrics.AcceptToSend(since)
			if nm.step != nil {
				next = append(next, startedSend(c.conv, c.fence, c.conversationID,
					message{pk: *nm.pk, id: *nm.id, seq: *nm.seq, payload: nm.payload}, *nm.step))
			}
			return nil
		})
		return err
	})
	err := conn.SendBatch(ctx, pb).Close()
	if err == nil && refill != nil && room > 0 {
		// The room the round freed, once worth a claim: more of the
		// tenant's conversations join the batch (never one alone).
		refill.max = room
		_, _, err = claimAndOpen(ctx, conn, fair.Turn{Tenant: refill.tenant}, lease, &cred.PhoneNumberID, nil, refill, false)
		if err != nil {
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) {
				d.logger.WarnContext(ctx, "batch: refill", slog.String("error", err.Error()))
				return nil, false, false
			}
			refill.convs = nil
			err = nil
		}
	}
	if err != nil {
		if refill != nil {
			refill.convs = nil
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			d.logger.WarnContext(ctx, "batch: record sends", slog.String("error", err.Error()))
			return nil, false, false
		}
		// Rolled back: each is recorded alone.
		for _, c := range byConv {
			c.recorded = false
		}
		return nil, false, true
	}
	return next, last && recorded == len(convs) && len(next) == 0, true
}

// endAlone ends conversation c of batch b the way its own drain would: a
// send is recorded as its drain records one (a failure settled: retry,
// dead letter, pause; a success the batch's write did not record, finished
// alone), and one never sent (no usable credential) takes its step from
// the send it started. Then the conversation is let go: due again at once
// for what is left. The batch's lease covers it meanwhile. cred is the
// batch's credential (nil: it could not be read).
func (r *Runner) endAlone(ctx, rctx context.Context, conn *pgxpool.Conn, b *batch, c *batchConv, t tenants.Tenant, cred *whatsapp.Credential, name string) bool {
	d := r.drainer
	// Letting c go leaves the batch's lease on the connection, which may
	// hold others of the batch still.
	s := &session{conn: conn, conv: c.conv, fence: c.fence, after: d.cfg.Lease.Milliseconds(), lease: lease{length: d.cfg.Lease, heard: time.Now()}}
	// The lease restarts with this statement, heard just before it.
	if _, err := conn.Exec(rctx, checkFence, c.conv, c.fence); err != nil {
		if err = s.written(err); errors.Is(err, ErrFenced) {
			return s.close()
		}
		return false
	}
	run := &run{d: d, s: s, tenant: t, conversationID: c.conversationID, credentialAt: b.credentialAt, cred: cred,
		log: d.logger.With(slog.Int64("conversation", c.conv), slog.String("runner", name), slog.Int64("fence", c.fence))}
	var (
		out outcome
		err error
	)
	if c.sent {
		out, err = run.record(rctx, c.m, &c.st, true, c.e)
	} else {
		out, err = run.step(ctx, c.m, &c.st, true)
	}
	return r.end(ctx, s, out.ended(), run.stop(err))
}
