package jobs

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/jobs/metrics"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/tenants"
)

// The batched drain. Most conversations are quiet: a reply now and then,
// one message queued when a worker comes. Drained one at a time, each such
// message cost a claim transaction and a finish transaction of five
// statements each, more than its River job costs river-plain (issue 11,
// `make bench` spread). A runner whose turn falls on an unpaced tenant
// therefore first claims up to Config.BatchSize of its quiet conversations in
// one statement (ordo.claim_batch: their locks, fences, ready rows and send
// steps), sends their messages at once, and records every send that
// succeeded in one statement (ordo.finish_batch), each write behind its
// conversation's fence. Anything else — a failed send, a conversation whose
// row an import holds, a credential that cannot be read — is ended one
// conversation at a time by the drain's own code, on the same connection,
// which holds their locks. Conversations that are not quiet (a backlog, an
// inbound message, a retry, a paced or capped tenant) go through the
// per-conversation drain: ordo.claim_batch stops at the first one, so the
// tenant's order of due conversations holds.

// batchClaimQuery claims a batch (ordo.claim_batch). It goes first in a
// claim's round trip (claimAndOpen); the one-conversation claim after it
// claims nothing when it found a batch.
const batchClaimQuery = `
SELECT conv, fence, conversation_id, message_pk, message_id, seq, payload, step_id, credential_at, more
FROM ordo.claim_batch($1, $2, $3, $4, $5)`

// finishBatchQuery records a batch's successful sends (ordo.finish_batch).
const finishBatchQuery = `SELECT conv, finished, since_accepted FROM ordo.finish_batch($1, $2, $3, $4, $5, $6, $7, $8)`

// endBatchQuery ends a batch's lease once its last conversations were ended
// one at a time.
const endBatchQuery = `SELECT set_config('ordo.batch_lease', '', false), set_config('idle_session_timeout', '0', false)`

// batch is what one ordo.claim_batch took: quiet conversations of one
// tenant, each with its message's send step started.
type batch struct {
	tenant       int64
	max          int
	convs        []batchConv
	credentialAt *time.Time // the tenant's WhatsApp credential's stamp
	more         bool       // another conversation of the tenant was due behind the batch
}

// batchConv is one conversation of a batch and what became of its send.
type batchConv struct {
	conv, fence    int64
	conversationID string
	m              message
	st             step
	sent           bool // the send was made (err: its failure)
	providerID     string
	err            error
	recorded       bool // ordo.finish_batch recorded it
}

// queue adds the batch's claim to a claim's round trip.
func (b *batch) queue(pb *pgx.Batch, lease int64, phone *string) {
	pb.Queue(batchClaimQuery, lockNamespace, b.tenant, b.max, lease, phone).Query(func(rows pgx.Rows) error {
		defer rows.Close()
		for rows.Next() {
			var c batchConv
			if err := rows.Scan(&c.conv, &c.fence, &c.conversationID, &c.m.pk, &c.m.id, &c.m.seq, &c.m.payload,
				&c.st.id, &b.credentialAt, &b.more); err != nil {
				return err
			}
			c.m.direction = "outbound"
			c.st = step{id: c.st.id, kind: "send", status: "running", request: c.m.payload, attempts: 1, started: true}
			b.convs = append(b.convs, c)
		}
		return rows.Err()
	})
}

// drainBatch sends b's messages at once and records them, ending every
// conversation of the batch and giving its room back as each ends (one left
// waiting for an import's row lock holds one worker's room, as its own
// drain would); false when the connection cannot be used again (dropping
// it releases what it still holds).
func (r *Runner) drainBatch(ctx context.Context, conn *pgxpool.Conn, b *batch, claimed time.Time, name string) bool {
	d := r.drainer
	open := len(b.convs)
	defer func() { r.room.give(open) }()
	for range b.convs {
		defer d.cfg.Metrics.DrainStarted()()
	}
	cred, haveCred := d.creds.get(b.tenant, b.credentialAt)
	if !haveCred {
		// Changed since it was cached: read once for the batch. A problem
		// with it is the drain's to settle (it pauses the tenant's sending).
		c, problem, err := (&run{d: d, tenant: tenants.Tenant{ID: b.tenant}}).loadCredential(ctx)
		if err == nil && problem == "" {
			d.creds.put(b.tenant, b.credentialAt, c)
			cred, haveCred = c, true
		}
	}
	if haveCred {
		lease := d.cfg.Lease
		callCtx, cancel := context.WithTimeout(ctx, min(d.cfg.SendTimeout, time.Until(claimed.Add(lease-leaseMargin(lease)))))
		var wg sync.WaitGroup
		for i := range b.convs {
			c := &b.convs[i]
			wg.Go(func() {
				if d.hooks.beforeEffect != nil {
					d.hooks.beforeEffect(c.st.id)
				}
				start := time.Now()
				c.providerID, c.err = (&run{d: d, conversationID: c.conversationID, cred: &cred}).send(callCtx, &c.st)
				c.sent = true
				d.cfg.Metrics.Call("send", time.Since(start), c.err)
				if d.hooks.afterEffect != nil {
					d.hooks.afterEffect(c.st.id)
				}
			})
		}
		wg.Wait()
		cancel()
	}

	// What was sent is recorded even when the worker is being stopped.
	rctx, cancelRecord := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancelRecord()
	if !r.finishBatch(rctx, conn, b) {
		return false
	}
	for _, c := range b.convs {
		if c.recorded {
			open--
			r.room.give(1)
		}
	}
	var t *tenants.Tenant
	for i := range b.convs {
		c := &b.convs[i]
		if c.recorded {
			continue
		}
		if t == nil {
			tt, err := d.tenants.ByID(rctx, b.tenant)
			if err != nil {
				d.logger.WarnContext(ctx, "batch: read tenant", slog.Int64("tenant_id", b.tenant), slog.String("error", err.Error()))
				return false
			}
			t = &tt
		}
		var pc *whatsapp.Credential
		if haveCred {
			pc = &cred
		}
		if !r.endAlone(ctx, rctx, conn, b, c, *t, pc, name) {
			return false
		}
		open--
		r.room.give(1)
	}
	if t != nil {
		if _, err := conn.Exec(rctx, endBatchQuery); err != nil {
			return false
		}
	}
	return true
}

// finishBatch records the batch's successful sends in one write; false when
// the connection is in an unknown state. A send it did not record is left
// for endAlone.
func (r *Runner) finishBatch(ctx context.Context, conn *pgxpool.Conn, b *batch) bool {
	d := r.drainer
	n := len(b.convs)
	convs, fences, steps, msgs, seqs := make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
	pids := make([]string, 0, n)
	byConv := make(map[int64]*batchConv, n)
	for i := range b.convs {
		c := &b.convs[i]
		if !c.sent || c.err != nil {
			continue
		}
		if d.hooks.beforeFinish != nil {
			d.hooks.beforeFinish(c.conv)
		}
		convs, fences, steps, msgs, seqs = append(convs, c.conv), append(fences, c.fence), append(steps, c.st.id), append(msgs, c.m.pk), append(seqs, c.m.seq)
		pids = append(pids, c.providerID)
		byConv[c.conv] = c
	}
	if len(convs) == 0 {
		return true
	}
	rows, _ := conn.Query(ctx, finishBatchQuery, lockNamespace, convs, fences, steps, msgs, seqs, pids, len(convs) == n)
	var (
		conv     int64
		finished bool
		since    time.Duration
	)
	_, err := pgx.ForEachRow(rows, []any{&conv, &finished, &since}, func() error {
		if c := byConv[conv]; c != nil {
			c.recorded = true
			c.st.status = "done"
			d.cfg.Metrics.Step("send", metrics.StepDone)
			d.cfg.Metrics.AcceptToSend(since)
		}
		return nil
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			d.logger.WarnContext(ctx, "batch: record sends", slog.String("error", err.Error()))
			return false
		}
		// Rolled back: each is recorded alone.
		for _, c := range byConv {
			c.recorded = false
		}
	}
	return true
}

// endAlone ends conversation c of batch b the way its own drain would: a
// send that failed is recorded as a failure (retry, dead letter, pause), one
// that succeeded but was not recorded with the batch is finished alone, and
// one never sent (no usable credential) is drained from its started step.
// The batch's lease (ordo.batch_lease) covers it meanwhile. cred is the
// batch's credential (nil: it could not be read).
func (r *Runner) endAlone(ctx, rctx context.Context, conn *pgxpool.Conn, b *batch, c *batchConv, t tenants.Tenant, cred *whatsapp.Credential, name string) bool {
	d := r.drainer
	s := &session{conn: conn, conv: c.conv, fence: c.fence, lease: d.cfg.Lease, heard: time.Now()}
	// The lease restarts with this statement, heard just before it.
	if _, err := conn.Exec(rctx, refreshQuery, c.conv, c.fence); err != nil {
		if err = s.written(err); errors.Is(err, ErrFenced) {
			return s.close()
		}
		return false
	}
	if !c.sent {
		st := convState{fence: c.fence, headSeq: c.m.seq - 1, tenantID: b.tenant, conversationID: c.conversationID,
			tenant: t, credentialAt: b.credentialAt, next: c.m, nextSteps: []step{c.st}}
		return r.drainClaimed(ctx, s, st, true, name)
	}
	run := &run{d: d, s: s, tenant: t, conversationID: c.conversationID, credentialAt: b.credentialAt, cred: cred,
		log: d.logger.With(slog.Int64("conversation", c.conv), slog.String("runner", name), slog.Int64("fence", c.fence))}
	var (
		out outcome
		err error
	)
	if c.err != nil {
		var f *failure
		if !errors.As(c.err, &f) {
			f = &failure{msg: c.err.Error()}
		}
		out, err = run.failed(rctx, c.m, &c.st, f)
	} else {
		out, err = run.finish(rctx, c.m, &c.st, &c.providerID, true, nil)
	}
	return r.end(ctx, s, out.ended(), run.stop(err))
}

// ended is how the run of a message's outcome ends its drain.
func (o outcome) ended() ended {
	switch {
	case o.kind == outcomeWait:
		return ended{park: true, wait: o.delay}
	case o.kind == outcomeDone && !o.finished:
		return ended{park: true} // the head moved; due again now for what is left
	}
	return ended{}
}
