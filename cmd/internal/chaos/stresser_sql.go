package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// sqlBatchers is how many application sessions run transactions at once,
// each over conversations of its own.
const sqlBatchers = 2

// sqlEnqueue is the SQL interface the contract gives other applications.
const sqlEnqueue = `SELECT id, seq, duplicate FROM ordo.enqueue_message($1, $2, $3, 'outbound', $4)`

// sqlBatches is an application enqueuing inside its own transactions, as
// the contract's SQL interface allows: each transaction enqueues one
// message to each of SQLBatch conversations spread over every tenant, and
// one in four is rolled back on purpose. A committed message must be sent
// like any other (its seq is the order of the transactions); a rolled-back
// one must never be, nor take a seq. A transaction whose commit failed
// (Postgres restarting, a deadlock) is retried with the same message ids,
// as an application would: the dedupe makes that safe.
//
// Its conversations are its own, so the REST clients' seq order and its
// own do not mix.
type sqlBatches struct {
	r      *run
	ledger *chaosLedger

	mu                    sync.Mutex
	committed, rolledBack int // transactions
	messages, retries     int
	unknown               int // transactions whose outcome was never learnt
}

func newSQLBatches(r *run, l *chaosLedger) *sqlBatches {
	return &sqlBatches{r: r, ledger: l}
}

var _ stresser = (*sqlBatches)(nil)

// Stress runs transactions until loadCtx ends; one whose commit is in
// doubt is retried until answerCtx ends.
func (s *sqlBatches) Stress(loadCtx, answerCtx context.Context) {
	pool, err := pgxpool.New(answerCtx, s.r.dbURL+"&application_name=chaos-sql&pool_max_conns=4")
	if err != nil {
		s.r.log.printf("sql batches: %v", err)
		return
	}
	defer pool.Close()
	var wg sync.WaitGroup
	for g := range sqlBatchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.session(loadCtx, answerCtx, pool, g, chaosRand(s.r.cfg.Seed, uint64(200+g)))
		}()
	}
	wg.Wait()
}

// Counts is the transactions committed and rolled back, the messages
// committed, the retries of a transaction in doubt, and the transactions
// never settled.
func (s *sqlBatches) Counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return map[string]int{"committed": s.committed, "rolled_back": s.rolledBack, "messages": s.messages, "retries": s.retries, "unknown": s.unknown}
}

// sqlConv is one of the application's conversations.
type sqlConv struct {
	tenant int
	id     string
	next   int
}

func (s *sqlBatches) session(loadCtx, answerCtx context.Context, pool *pgxpool.Pool, g int, rng *rand.Rand) {
	var convs []*sqlConv
	for t := range s.r.tenants {
		for j := range 3 * s.r.cfg.SQLBatch / len(s.r.tenants) {
			convs = append(convs, &sqlConv{tenant: t, id: fmt.Sprintf("1%02d777%d%05d", t, g, j)})
		}
	}
	for loadCtx.Err() == nil {
		batch := make([]*chaosMsg, 0, s.r.cfg.SQLBatch)
		for _, i := range rng.Perm(len(convs))[:min(s.r.cfg.SQLBatch, len(convs))] {
			c := convs[i]
			c.next++
			tag := fmt.Sprintf("t%d-s%d-%s-%d", c.tenant, g, c.id[len(c.id)-5:], c.next)
			batch = append(batch, &chaosMsg{tenant: c.tenant, conv: c.id, id: "sql-" + tag, text: "sql " + tag})
		}
		rollback := rng.IntN(4) == 0
		if rollback {
			// Nothing of it may ever be sent: a delivery of these texts is
			// an unexpected send.
			for _, m := range batch {
				m.id, m.text = m.id+"-rolled-back", m.text+" "+chaosRejected
			}
		}
		s.transact(answerCtx, pool, batch, rollback)
		select {
		case <-loadCtx.Done():
		case <-time.After(time.Duration(500+rng.IntN(1000)) * time.Millisecond):
		}
	}
}

// transact runs one transaction to a known end: committed (its answers go
// to the ledger), or rolled back.
func (s *sqlBatches) transact(ctx context.Context, pool *pgxpool.Pool, batch []*chaosMsg, rollback bool) {
	var failed []chaosTry // the tries whose outcome was in doubt, for the ledger
	for attempt := 0; ; attempt++ {
		sent := time.Now()
		answers, err := s.try(ctx, pool, batch, rollback)
		t := chaosTry{copy: 1, try: attempt + 1, sent: sent, at: time.Now(), sql: true}
		if err != nil && !rollback {
			t.err = err.Error()
			failed = append(failed, t)
		}
		if err == nil || rollback {
			// A transaction meant to roll back is rolled back whatever
			// happened to it.
			s.mu.Lock()
			if rollback {
				s.rolledBack++
			} else {
				s.committed++
				s.messages += len(batch)
			}
			s.retries += attempt
			s.mu.Unlock()
			if !rollback {
				for i, m := range batch {
					s.ledger.offer(m)
					for _, f := range failed {
						s.ledger.tried(m, f)
					}
					status := 202
					if answers[i].Duplicate {
						status = 200
					}
					s.ledger.answerTry(m, status, answers[i], t)
				}
			}
			return
		}
		if ctx.Err() != nil {
			s.mu.Lock()
			s.unknown++
			s.mu.Unlock()
			s.ledger.count(0, 0, len(batch)) // offered, never known to be accepted
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// try runs the transaction once. A nil error after a commit means every
// message of the batch is committed; any error leaves the outcome in doubt.
func (s *sqlBatches) try(ctx context.Context, pool *pgxpool.Pool, batch []*chaosMsg, rollback bool) ([]chaosAnswer, error) {
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tx, err := pool.Begin(tctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(tctx)) }()
	answers := make([]chaosAnswer, len(batch))
	for i, m := range batch {
		payload, _ := json.Marshal(map[string]any{"to": m.conv, "type": "text", "text": map[string]string{"body": m.text}})
		var id int64
		if err := tx.QueryRow(tctx, sqlEnqueue, s.r.tenants[m.tenant].slug, m.conv, m.id, payload).Scan(&id, &answers[i].Seq, &answers[i].Duplicate); err != nil {
			return nil, fmt.Errorf("enqueue %s: %w", m.id, err)
		}
		answers[i].ID, answers[i].MessageID, answers[i].ConversationID = fmt.Sprint(id), m.id, m.conv
	}
	if rollback {
		return nil, errors.New("rolled back on purpose")
	}
	if err := tx.Commit(tctx); err != nil {
		return nil, err
	}
	return answers, nil
}
