package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// lockNamespace is the first key of the drains' conversation locks
// (ordo.drain_key): "ordo" in ASCII.
const lockNamespace = 0x6f72646f

// pruneLockKey is the second key of the advisory lock the pruner takes (the
// first is lockNamespace): the lock's objsubid is 2 like a conversation's,
// and no conversation id is negative, so the two never meet.
const pruneLockKey = -1

// dueTenants are the tenants whose retention can remove something, with the
// horizon their content goes before.
const dueTenants = `
SELECT id, now() - retention FROM ordo.tenants WHERE retention > interval '0' ORDER BY id`

// pruneBatch is one transaction of pruning: it runs only in the process
// that holds the pruner lock for it, so two workers never scan the same rows.
const pruneBatch = `
SELECT p.messages, p.steps, p.dead_letters, p.sandbox_sends, p.more
FROM pg_try_advisory_xact_lock($1::int, $2::int) AS lk(ok),
     LATERAL ordo.prune_messages($3, $4, $4, $5) p
WHERE lk.ok`

// PruneCounts is what pruning removed: the messages whose content went (their
// dedupe records stay) and the rows deleted with it.
type PruneCounts struct {
	Messages     int `json:"messages"`
	Steps        int `json:"steps"`
	DeadLetters  int `json:"dead_letters"`
	SandboxSends int `json:"sandbox_sends"`
}

func (c *PruneCounts) add(o PruneCounts) {
	c.Messages += o.Messages
	c.Steps += o.Steps
	c.DeadLetters += o.DeadLetters
	c.SandboxSends += o.SandboxSends
}

// Pruner removes the content of finished messages past their tenant's
// retention, in small transactions (ordo.prune_messages): a batch locks only
// the messages it prunes, skipping any that is locked, and no conversation
// row, so ingest and drains never wait for it. A periodic River job runs it
// (PruneArgs, maintenance.go); an advisory lock per batch keeps two runs
// from doing the same work.
type Pruner struct {
	pool   *pgxpool.Pool
	batch  int
	logger *slog.Logger
}

// NewPruner returns a Pruner that handles batch messages per transaction.
func NewPruner(pool *pgxpool.Pool, batch int, logger *slog.Logger) *Pruner {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if batch <= 0 {
		batch = PruneBatchDefault
	}
	return &Pruner{pool: pool, batch: batch, logger: logger}
}

// Once prunes every tenant's messages that are past its retention now, batch
// by batch, and says what it removed. Another process pruning at the same
// time makes it stop early (that process goes on).
func (p *Pruner) Once(ctx context.Context) (PruneCounts, error) {
	type due struct {
		tenant  int64
		horizon time.Time
	}
	rows, _ := p.pool.Query(ctx, dueTenants)
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (due, error) {
		var d due
		return d, r.Scan(&d.tenant, &d.horizon)
	})
	if err != nil {
		return PruneCounts{}, fmt.Errorf("list tenants to prune: %w", err)
	}
	var total PruneCounts
	for _, d := range list {
		for {
			var (
				n    PruneCounts
				more bool
			)
			err := p.pool.QueryRow(ctx, pruneBatch, lockNamespace, pruneLockKey, d.tenant, d.horizon, p.batch).
				Scan(&n.Messages, &n.Steps, &n.DeadLetters, &n.SandboxSends, &more)
			if err == pgx.ErrNoRows {
				return total, nil // another process holds the pruner lock
			}
			if err != nil {
				return total, fmt.Errorf("prune messages of tenant %d: %w", d.tenant, err)
			}
			total.add(n)
			if !more || ctx.Err() != nil {
				break
			}
		}
	}
	return total, ctx.Err()
}
