package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// sql-floor is the physical bound: the durable writes one accepted and sent
// message needs in ordo's schema, and nothing else — no HTTP, no queue, no
// lock, no provider. Two transactions per message, as few as the guarantees
// allow: accepting (take the conversation's next seq, insert the message)
// must commit before the 2xx, and finishing (the step done, the message
// done, the head moved) must commit after the send. Accepting runs with the
// load generator's concurrency; finishing with the systems' worker count,
// each conversation always on the same finisher so its messages finish in
// seq order.

// floorAccept is the accepting transaction, one statement.
const floorAccept = `
WITH c AS (
    INSERT INTO ordo.conversations AS c (tenant_id, conversation_id, last_seq)
    VALUES ($1, $2, 1)
    ON CONFLICT (tenant_id, conversation_id) DO UPDATE SET last_seq = c.last_seq + 1
    RETURNING c.id, c.last_seq)
INSERT INTO ordo.messages (tenant_id, conversation_pk, message_id, seq, direction, payload)
SELECT $1, c.id, $3, c.last_seq, 'outbound', $4 FROM c
RETURNING id, conversation_pk, seq`

// The finishing transaction, one pipelined batch.
const (
	floorStepDone = `
INSERT INTO ordo.steps (message_pk, idx, kind, status, attempts, provider_message_id, started_at, finished_at)
VALUES ($1, 0, 'send', 'done', 1, $2, now(), now())`
	floorMessageDone = `UPDATE ordo.messages SET status = 'done', finished_at = now() WHERE id = $1`
	floorMoveHead    = `UPDATE ordo.conversations SET head_seq = $2 WHERE id = $1`
)

// floorCheck counts, from the database, what the floor finished and how
// often a conversation's messages finished out of seq order.
const floorCheck = `
SELECT count(*) FILTER (WHERE status = 'done'),
       count(*) FILTER (WHERE prev_finished > finished_at)
FROM (SELECT status, finished_at,
             lag(finished_at) OVER (PARTITION BY conversation_pk ORDER BY seq) AS prev_finished
      FROM ordo.messages) m`

// floorMessage is an accepted message waiting to be finished.
type floorMessage struct {
	i        int
	id, conv int64
	seq      int64
}

func (b *benchEnv) runFloor(ctx context.Context, l benchLoad) (benchResult, error) {
	dbName, url, drop, err := b.newDatabase(ctx, ordoTemplate)
	if err != nil {
		return benchResult{}, err
	}
	defer drop()
	pool, err := pgxpool.New(ctx, url+"&pool_max_conns="+strconv.Itoa(l.concurrency+b.cfg.workers+5))
	if err != nil {
		return benchResult{}, err
	}
	defer pool.Close()
	tenantIDs := make([]int64, l.tenants)
	for t := range l.tenants {
		if err := pool.QueryRow(ctx, "INSERT INTO ordo.tenants (slug) VALUES ($1) RETURNING id", "bench-"+strconv.Itoa(t)).Scan(&tenantIDs[t]); err != nil {
			return benchResult{}, fmt.Errorf("create tenant: %w", err)
		}
	}

	n := l.messages()
	finished := make([]time.Time, n)
	queues := make([]chan floorMessage, b.cfg.workers)
	for w := range queues {
		queues[w] = make(chan floorMessage, n/b.cfg.workers+1)
	}
	var (
		ferrMu sync.Mutex
		ferr   error
		wg     sync.WaitGroup
	)
	startFinishers := func() {
		for _, q := range queues {
			wg.Go(func() {
				for m := range q {
					batch := &pgx.Batch{}
					batch.Queue(floorStepDone, m.id, "wamid.floor."+strconv.Itoa(m.i))
					batch.Queue(floorMessageDone, m.id)
					batch.Queue(floorMoveHead, m.conv, m.seq)
					if err := pool.SendBatch(ctx, batch).Close(); err != nil {
						ferrMu.Lock()
						ferr = fmt.Errorf("finish: %w", err)
						ferrMu.Unlock()
						continue
					}
					finished[m.i] = time.Now()
				}
			})
		}
	}
	// Messages are accepted into held when backlogged, else straight into
	// their finisher's queue.
	var (
		held   []floorMessage
		heldMu sync.Mutex
	)
	accept := func(ctx context.Context, i int) error {
		m := floorMessage{i: i}
		payload := restBody(i, l.conv(i))
		err := pool.QueryRow(ctx, floorAccept, tenantIDs[l.tenant(i)], conversationID(l.conv(i)), messageID(i), payload).Scan(&m.id, &m.conv, &m.seq)
		if err != nil {
			return err
		}
		if l.backlog {
			heldMu.Lock()
			held = append(held, m)
			heldMu.Unlock()
			return nil
		}
		queues[l.conv(i)%len(queues)] <- m
		return nil
	}

	pgCPU, xacts, wal := b.postgresCPU(), b.xacts(ctx, dbName), b.walLSN(ctx)
	if !l.backlog {
		startFinishers()
	}
	o, err := offer(ctx, l, accept)
	if err != nil {
		return benchResult{}, err
	}
	from := o.start
	var ingestCPU *benchCPU
	if l.backlog {
		ingestCPU = cpuPerMessage(0, b.postgresCPU()-pgCPU, n)
		from = time.Now()
		startFinishers()
		// held is in acceptance order; per conversation that is seq order.
		for _, m := range held {
			queues[l.conv(m.i)%len(queues)] <- m
		}
	}
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	if ferr != nil {
		return benchResult{}, ferr
	}

	pool.Close()
	b.waitSessionsGone(ctx, dbName)
	pgCPU = b.postgresCPU() - pgCPU
	r := judgeTimes(l, "sql-floor", o, finished, from)
	r.CPU = cpuPerMessage(0, pgCPU, n)
	r.TxPerMsg = b.xactsPerMessage(ctx, dbName, xacts, n)
	r.WALKBPerMsg = b.walKBPerMessage(ctx, wal, n)
	check, err := pgx.Connect(ctx, url)
	if err != nil {
		return benchResult{}, err
	}
	defer check.Close(context.WithoutCancel(ctx))
	var done, outOfOrder int
	if err := check.QueryRow(ctx, floorCheck).Scan(&done, &outOfOrder); err != nil {
		return benchResult{}, fmt.Errorf("check: %w", err)
	}
	r.Lost, r.OrderViolations = n-done, outOfOrder
	if l.backlog {
		r.IngestS = round2(o.end.Sub(o.start).Seconds())
		r.IngestCPU = ingestCPU
	}
	return r, nil
}
