package engine

// Group commit for Engine.Ingest. One message per transaction costs a round
// trip and a commit (a WAL flush) each; when many Ingest calls are in flight
// at once, they share one: a pgx batch of enqueue_message calls, pipelined,
// in one implicit transaction, committed once. Every caller is answered only
// after that commit, so a 2xx still means committed.
//
// There is no background goroutine to start or stop (tests make many
// Engines and never close them): a call that finds a free slot starts a
// short-lived goroutine that runs batches while calls are waiting, and ends
// when none are. There is no timer either: a lone call runs at once, and
// calls gather only while earlier batches are in flight.
//
// A batch holds several conversations' rows, so it never waits for one
// while it holds another (sql/LOCKING.md): an application's transaction
// may hold them in any order, and a wait inside such a cycle lets a
// deadlock check fail someone. It waits only for its first conversation's
// row (ordo.enqueue_messages), before it holds any, and only tries each
// later one; a conversation another transaction holds leaves the batch,
// its messages together, for a transaction of its own (runAlone) that
// waits for that row alone. No batch takes a conversation a running batch
// or such a transaction holds (batcher.take), so ordo's own batches never
// find each other's rows taken.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	ordosql "github.com/ordo-dev/ordo/sql"
)

const (
	// defaultMaxInFlight bounds the batches running at once, so a burst of
	// calls takes a few pool connections, not one per call.
	defaultMaxInFlight = 4
	// defaultMaxBatch bounds the messages of one batch: a bigger batch holds
	// its conversations' row locks longer and costs more when it has to be
	// run again one by one.
	defaultMaxBatch = 64
	// batchTimeout bounds one batch, whose context is no single caller's.
	batchTimeout = WriteTimeout
	// batchLockTimeout bounds how long a batch waits for its first
	// conversation's row (held by an application's long transaction, say),
	// the one row it waits for. A batch that would wait longer fails and
	// its messages run on their own (with LockTimeout each), so one locked
	// conversation holds up neither the batch slots nor the other tenants'
	// messages.
	batchLockTimeout = "500ms"
	// fallbackParallel bounds the messages of failed batches, and the
	// conversations that left a batch, run on their own at once (each
	// takes a pool connection for up to LockTimeout): the
	// pool is shared with the drains, whose sessions must not wait for one.
	fallbackParallel = 8
)

// LockTimeout bounds how long one message's ingest waits for a lock its
// conversation's row is held with; past it the message is refused with
// 503 and Retry-After (nothing stored), never a hang for everyone else.
const LockTimeout = time.Second

// lockTimeoutQuery sets the lock wait bound for the rest of the (implicit)
// transaction it runs in.
const lockTimeoutQuery = `SELECT set_config('lock_timeout', $1, true)`

// checkKeyQuery refuses a revoked API key (NewMessage.KeyHash) in the
// transaction that would store its message.
const checkKeyQuery = `SELECT ordo.check_api_key($1)`

// lockTimeoutSetting is LockTimeout as lockTimeoutQuery's argument.
var lockTimeoutSetting = strconv.FormatInt(LockTimeout.Milliseconds(), 10) + "ms"

// ingestCall is one Ingest waiting for its batch.
type ingestCall struct {
	ctx  context.Context
	msg  NewMessage
	done chan ingestResult // buffered: a batch never waits for a caller that left
}

type ingestResult struct {
	accepted Accepted
	err      error
}

// batcher holds the calls waiting for a batch and counts the running ones.
type batcher struct {
	maxInFlight int
	maxBatch    int
	lockTimeout string // batchLockTimeout; tests that hold a batch on purpose lengthen it

	mu      sync.Mutex
	pending []*ingestCall
	running int
	// inFlight counts, per conversation, the calls of running batches.
	inFlight map[convKey]int
	// locked holds conversations a message of which just waited out
	// LockTimeout, until when: their other messages are refused at once
	// instead of each failing a batch and waiting again.
	locked map[convKey]time.Time

	// batches and retried count batches sent and batches that failed and
	// were run again one message at a time, left the messages that left a
	// batch because another transaction held their conversation; tests
	// read them.
	batches atomic.Int64
	retried atomic.Int64
	left    atomic.Int64
}

func newBatcher() *batcher {
	return &batcher{maxInFlight: defaultMaxInFlight, maxBatch: defaultMaxBatch, lockTimeout: batchLockTimeout}
}

// add queues c and, when a slot is free, takes a batch for the caller to run.
func (b *batcher) add(c *ingestCall) []*ingestCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending = append(b.pending, c)
	if b.running >= b.maxInFlight {
		return nil
	}
	return b.take()
}

// finish frees batch's slot and its conversations and takes the next batch
// for the same runner, so waiting calls never depend on a later arrival to
// start them.
func (b *batcher) finish(batch []*ingestCall) []*ingestCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.running--
	b.forget(batch)
	if len(b.pending) == 0 {
		return nil
	}
	return b.take()
}

// keep counts group's conversation in flight (see take) until release,
// past the end of the batch it left.
func (b *batcher) keep(group []*ingestCall) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inFlight[keyOf(group[0].msg)] += len(group)
}

// release ends keep and, when a slot is free, takes a batch of the calls
// that waited for group's conversation, for the caller to run.
func (b *batcher) release(group []*ingestCall) []*ingestCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.forget(group)
	if b.running >= b.maxInFlight || len(b.pending) == 0 {
		return nil
	}
	return b.take()
}

// forget takes calls out of the conversations in flight. b.mu is held.
func (b *batcher) forget(calls []*ingestCall) {
	for _, c := range calls {
		k := keyOf(c.msg)
		if b.inFlight[k]--; b.inFlight[k] <= 0 {
			delete(b.inFlight, k)
		}
	}
}

// take moves up to maxBatch pending calls, oldest first, into a new batch,
// leaving those of a conversation a running batch holds to a later one: a
// batch only tries the rows of its conversations after the first, and two
// batches of one conversation at once would send the second's messages
// one by one. Nil when every pending call waits so. b.mu is held.
func (b *batcher) take() []*ingestCall {
	var batch, rest []*ingestCall
	for _, c := range b.pending {
		if len(batch) < b.maxBatch && b.inFlight[keyOf(c.msg)] == 0 {
			batch = append(batch, c)
		} else {
			rest = append(rest, c)
		}
	}
	b.pending = rest
	if len(batch) == 0 {
		return nil
	}
	if b.inFlight == nil {
		b.inFlight = make(map[convKey]int)
	}
	for _, c := range batch {
		b.inFlight[keyOf(c.msg)]++
	}
	b.running++
	return batch
}

// convKey names a conversation across tenants.
type convKey struct{ tenant, conversation string }

func keyOf(m NewMessage) convKey { return convKey{m.Tenant, m.ConversationID} }

// isLocked reports whether k's row was found held by another transaction
// within the last LockTimeout.
func (b *batcher) isLocked(k convKey) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	until, ok := b.locked[k]
	if ok && time.Now().After(until) {
		delete(b.locked, k)
		return false
	}
	return ok
}

// markLocked records that k's row is held by another transaction.
func (b *batcher) markLocked(k convKey) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if b.locked == nil {
		b.locked = make(map[convKey]time.Time)
	}
	// Found locked is rare (an import holding rows): forgetting the ones
	// whose time is over here keeps the map to those of the last
	// LockTimeout.
	for c, until := range b.locked {
		if now.After(until) {
			delete(b.locked, c)
		}
	}
	b.locked[k] = now.Add(LockTimeout)
}

// errLocked is the answer to a message of a conversation found locked.
var errLocked = &Error{Code: CodeUnavailable, Message: "the conversation is locked by another transaction; retry later"}

// state reports the running batches and the waiting calls (for tests).
func (b *batcher) state() (running, pending int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.running, len(b.pending)
}

// ingestGrouped is Ingest through the batcher: it returns once the batch
// holding m committed (or failed), or when ctx ends.
func (e *Engine) ingestGrouped(ctx context.Context, m NewMessage) (Accepted, error) {
	if err := ctx.Err(); err != nil {
		return Accepted{}, translate(err, "enqueue message")
	}
	c := &ingestCall{ctx: ctx, msg: m, done: make(chan ingestResult, 1)}
	if batch := e.ingest.add(c); batch != nil {
		// Its own goroutine, so this caller can still leave on its ctx
		// while the others' messages are being committed.
		go e.runBatches(batch)
	}
	select {
	case r := <-c.done:
		return r.accepted, r.err
	case <-ctx.Done():
		select {
		case r := <-c.done:
			return r.accepted, r.err
		default:
		}
		// If the batch was sent, the message may still commit: as when a
		// client hangs up mid-request, a retry gets it as a duplicate.
		return Accepted{}, translate(ctx.Err(), "enqueue message")
	}
}

// runBatches runs batch, then every batch that gathered meanwhile and finds
// no other runner, and returns when no call is waiting.
func (e *Engine) runBatches(batch []*ingestCall) {
	for batch != nil {
		e.runBatch(batch)
		batch = e.ingest.finish(batch)
	}
}

// runBatch commits calls in one transaction and answers every one of them.
func (e *Engine) runBatch(calls []*ingestCall) {
	// Calls that left before their batch was sent are not sent.
	live := make([]*ingestCall, 0, len(calls))
	for _, c := range calls {
		if err := c.ctx.Err(); err != nil {
			c.done <- ingestResult{err: translate(err, "enqueue message")}
			continue
		}
		if e.ingest.isLocked(keyOf(c.msg)) {
			c.done <- ingestResult{err: errLocked} // it would fail the whole batch
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	// Conversations sorted (the lock order, sql/LOCKING.md), each one's
	// messages together and, by the stable sort, in arrival order.
	slices.SortStableFunc(live, func(a, b *ingestCall) int {
		return cmp.Or(strings.Compare(a.msg.Tenant, b.msg.Tenant), strings.Compare(a.msg.ConversationID, b.msg.ConversationID))
	})
	ctx, cancel := context.WithTimeout(context.WithoutCancel(live[0].ctx), batchTimeout)
	defer cancel()

	e.ingest.batches.Add(1)
	results, left, err := e.enqueueBatch(ctx, live, e.ingest.lockTimeout)
	if err == nil {
		var busy []*ingestCall
		for i, c := range live {
			if left[i] {
				busy = append(busy, c)
				continue
			}
			c.done <- results[i]
		}
		// Conversations another transaction held (not a fault: no log):
		// each in a transaction of its own, off the batch slot, and still
		// in flight meanwhile, so their next calls wait for it.
		for _, group := range conversationGroups(busy) {
			e.ingest.left.Add(int64(len(group)))
			e.ingest.keep(group)
			go e.runAlone(group)
		}
		return
	}
	if len(live) == 1 && !isLockTimeout(err) || errors.Is(err, ordosql.ErrCommitUnconfirmed) {
		// A batch of one is the single path: its error is the message's own.
		// A commit without its standby's confirmation stored every message
		// on the primary: each is answered 503, and not run again, which
		// would answer a first offer "duplicate".
		for _, c := range live {
			c.done <- ingestResult{err: translate(err, "enqueue message")}
		}
		return
	}
	// The whole transaction rolled back (one bad message, a deadlock, a lost
	// connection…): run each message on its own, so a bad one fails only
	// itself and every caller gets the answer it would get unbatched.
	e.ingest.retried.Add(1)
	level, attrs := slog.LevelInfo, []any{"messages", len(live)}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		attrs = append(attrs, "sqlstate", pgErr.Code)
	}
	if code := ErrorCode(translate(err, "")); code == CodeInvalid || code == CodeNotFound || code == CodeReused || code == CodeUnauthorized ||
		code == CodeOutsideWindow || code == CodeUnavailable {
		// A client's bad input, or Postgres away (logged once, by its
		// watch, and answered 503): not a fault of this batch.
		level = slog.LevelDebug
	}
	e.logger.Log(ctx, level, "ingest batch failed; running its messages one by one", attrs...)
	// Off the batch slot: a message waiting for its conversation's lock
	// must not keep the next batches from running.
	go e.ingestEach(live)
}

// runAlone commits group, one conversation's calls that left a batch
// because another transaction held its row, in a transaction of its own
// that waits for that row (up to LockTimeout) holding no other, and
// answers them (at most fallbackParallel such transactions at once). A
// wait cut off refuses them all (503, Retry-After), as ingestEach would;
// any other failure runs them one by one. Then it frees the conversation
// for the batches (batcher.keep) and runs those that gathered meanwhile.
func (e *Engine) runAlone(group []*ingestCall) {
	defer func() {
		if batch := e.ingest.release(group); batch != nil {
			e.runBatches(batch)
		}
	}()
	k := keyOf(group[0].msg)
	if e.ingest.isLocked(k) {
		for _, c := range group {
			c.done <- ingestResult{err: errLocked}
		}
		return
	}
	e.fallbackSem <- struct{}{}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(group[0].ctx), batchTimeout)
	results, _, err := e.enqueueBatch(ctx, group, lockTimeoutSetting)
	cancel()
	<-e.fallbackSem
	if err != nil && !isLockTimeout(err) && len(group) > 1 && !errors.Is(err, ordosql.ErrCommitUnconfirmed) {
		e.ingestEach(group) // a bad message among them fails only itself
		return
	}
	if isLockTimeout(err) {
		e.ingest.markLocked(k)
	}
	for i, c := range group {
		if err != nil {
			c.done <- ingestResult{err: translate(err, "enqueue message")}
			continue
		}
		c.done <- results[i]
	}
}

// isLockTimeout reports whether err is a lock wait cut off by lock_timeout.
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.LockNotAvailable
}

// ingestEach runs each call in its own transaction, a conversation's calls
// in order, conversations side by side (at most fallbackParallel at once),
// and answers each call.
func (e *Engine) ingestEach(calls []*ingestCall) {
	var wg sync.WaitGroup
	for _, group := range conversationGroups(calls) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.fallbackSem <- struct{}{}
			defer func() { <-e.fallbackSem }()
			for _, c := range group {
				if e.ingest.isLocked(keyOf(c.msg)) {
					// The conversation's row is held by someone else: the
					// group's later messages would wait on it in turn.
					c.done <- ingestResult{err: errLocked}
					continue
				}
				a, err := e.ingestOne(c.ctx, c.msg)
				if isLockTimeout(err) {
					e.ingest.markLocked(keyOf(c.msg))
				}
				c.done <- ingestResult{accepted: a, err: err}
			}
		}()
	}
	wg.Wait()
}

// ingestOne accepts m in a transaction of its own whose lock waits are
// bounded by LockTimeout, committed durably (writeTx).
func (e *Engine) ingestOne(ctx context.Context, m NewMessage) (a Accepted, err error) {
	err = e.writeTx(ctx, func(tx pgx.Tx) error {
		a, err = e.ingestTx(ctx, tx, m) // checked by Ingest
		return err
	})
	if err != nil {
		return Accepted{}, translate(err, "enqueue message")
	}
	return a, nil
}

// enqueueBatch stores calls (sorted by conversation) in one pipelined
// implicit transaction, one ordo.enqueue_messages per conversation, and
// returns the answers once it committed. The transaction waits only for
// its first conversation's row, while it holds none: every later one is
// only tried, and a conversation another transaction holds (an
// application's import, a drain, another batch) leaves the batch whole —
// left[i] is true for each of its calls, answered by nobody yet — so a
// batch never waits for a row while it holds another (sql/LOCKING.md).
// Any error means nothing of the batch was stored.
func (e *Engine) enqueueBatch(ctx context.Context, calls []*ingestCall, lockTimeout string) (out []ingestResult, left []bool, err error) {
	batch := &pgx.Batch{}
	batch.Queue(lockTimeoutQuery, lockTimeout)
	// Each API key of the batch checked once, in the transaction that
	// stores its messages: a batch is mostly one tenant's, one key's.
	keys := map[string]bool{}
	for _, c := range calls {
		if c.msg.KeyHash != nil && !keys[string(c.msg.KeyHash)] {
			keys[string(c.msg.KeyHash)] = true
			batch.Queue(checkKeyQuery, c.msg.KeyHash)
		}
	}
	groups := conversationGroups(calls)
	for g, group := range groups {
		var msgs convMessages
		for _, c := range group {
			msgs.add(c.msg)
		}
		q, args := msgs.query(g == 0)
		batch.Queue(q, args...)
	}
	queuePrepareCommit(batch)
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Release()
	br := conn.SendBatch(ctx, batch)
	for range 1 + len(keys) {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, nil, err
		}
	}
	out = make([]ingestResult, len(calls))
	left = make([]bool, len(calls))
	ids := make([]int64, len(calls))
	var dups []int
	i := 0
	for _, group := range groups {
		n, err := readGroup(br, group, out[i:i+len(group)], ids[i:i+len(group)])
		if err != nil {
			_ = br.Close()
			return nil, nil, err
		}
		for k := range group {
			switch {
			case n == 0:
				left[i+k] = true
			case out[i+k].accepted.Duplicate:
				dups = append(dups, i+k)
			}
		}
		i += len(group)
	}
	if err := e.commitBatch(ctx, conn, br); err != nil {
		return nil, nil, err
	}
	// A duplicate answers with its original's conversation and status, read
	// after the commit: an original committed by another transaction while
	// enqueue_message ran is invisible to the batch's own statements (their
	// snapshots are older), and a join against the function's result would
	// be planned as a scan of the whole table. Duplicates are rare.
	for _, i := range dups {
		a := &out[i].accepted
		if err := conn.QueryRow(ctx, originalQuery, ids[i]).Scan(&a.ConversationID, &a.Status); err != nil {
			out[i] = ingestResult{err: translate(err, "read original message")}
		}
	}
	return out, left, nil
}

// readGroup reads one conversation's answers from br into out and ids and
// returns how many rows came: len(group), or 0 when its row was held.
func readGroup(br pgx.BatchResults, group []*ingestCall, out []ingestResult, ids []int64) (int, error) {
	rows, err := br.Query()
	if err != nil {
		return 0, err
	}
	got, err := scanEnqueued(rows, len(group))
	if err != nil {
		return 0, err
	}
	for n, r := range got {
		c := group[n]
		ids[n] = r.id
		out[n].accepted = Accepted{ID: strconv.FormatInt(r.id, 10), MessageID: c.msg.MessageID, ConversationID: c.msg.ConversationID,
			Seq: r.seq, Duplicate: r.duplicate, Status: "queued"}
	}
	return len(got), nil
}

// conversationGroups splits calls, sorted by conversation, into each
// conversation's run.
func conversationGroups(calls []*ingestCall) [][]*ingestCall {
	var groups [][]*ingestCall
	for i := 0; i < len(calls); {
		j := i + 1
		for j < len(calls) && keyOf(calls[j].msg) == keyOf(calls[i].msg) {
			j++
		}
		groups = append(groups, calls[i:j:j])
		i = j
	}
	return groups
}

// One conversation's messages in a transaction that holds several
// conversations: a batch here, and a webhook delivery (webhooks.go),
// which follows the same rule — its first conversation's row waited for,
// each later one only tried, a held one committed in a transaction of its
// own that waits for that row alone.

// enqueueGroupQuery stores the messages of one conversation, in order
// (ordo.enqueue_messages, checked as enqueueQuery's): $7 true waits for
// the conversation's row, false only tries it, and no row back then means
// another transaction holds it and nothing was stored.
const enqueueGroupQuery = `SELECT id, seq, duplicate FROM ordo.enqueue_messages($1, $2, $3, $4, $5, $6, $7, true)`

// convMessages is one conversation's messages, in order, as
// ordo.enqueue_messages takes them.
type convMessages struct {
	tenant, conversation string
	ids                  []string
	dirs                 []*string
	payloads             []json.RawMessage
	onReuse              []string
}

// add appends m, a message of g's conversation.
func (g *convMessages) add(m NewMessage) {
	g.tenant, g.conversation = m.Tenant, m.ConversationID
	var dir *string
	if m.Direction != "" {
		dir = &m.Direction
	}
	g.ids, g.dirs = append(g.ids, m.MessageID), append(g.dirs, dir)
	g.payloads, g.onReuse = append(g.payloads, m.Payload), append(g.onReuse, m.onReuse())
}

// query is the statement that stores g's messages and its arguments,
// whose rows scanEnqueued reads: enqueueGroupQuery, waiting for the
// conversation's row (a transaction's first conversation) or only trying
// it. A first conversation of one message waits for its row as a message
// alone does: ordo.enqueue_message itself (enqueueQuery), without the
// per-conversation function around it, which cost about 0.05 ms of a
// batch's 0.43 (bench hot, pg_stat_statements): most conversations of a
// busy batch, and most webhook deliveries, carry one message.
func (g *convMessages) query(wait bool) (string, []any) {
	if wait && len(g.ids) == 1 {
		return enqueueQuery, []any{g.tenant, g.conversation, g.ids[0], g.dirs[0], g.payloads[0], g.onReuse[0]}
	}
	return enqueueGroupQuery, []any{g.tenant, g.conversation, g.ids, g.dirs, g.payloads, g.onReuse, wait}
}

// enqueued is ordo.enqueue_messages' answer for one message.
type enqueued struct {
	id, seq   int64
	duplicate bool
}

// scanEnqueued reads enqueueGroupQuery's rows for n messages: n answers in
// their order, or none when another transaction held the conversation.
func scanEnqueued(rows pgx.Rows, n int) ([]enqueued, error) {
	defer rows.Close()
	var out []enqueued
	for rows.Next() {
		if len(out) == n {
			return nil, fmt.Errorf("enqueue messages: more answers than the %d messages", n)
		}
		var a enqueued
		if err := rows.Scan(&a.id, &a.seq, &a.duplicate); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) != 0 && len(out) != n {
		return nil, fmt.Errorf("enqueue messages: %d answers for %d messages", len(out), n)
	}
	return out, nil
}
