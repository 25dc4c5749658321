package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/jobs"
)

// The claim scenario measures what the scheduler pays per claim as the
// ready set grows (the claim's cost must not grow with idle tenants or
// conversations). In an ordo database it fills ordo.ready
// directly — tenants with due conversations, tenants with none, and
// conversations that wait (due later) — then times, on one connection,
// the scheduler's walk over tenants with due work (jobs.ActiveTenantsQuery,
// once per round) and ordo.claim for the tenants in turn, alone, with a
// lease of 0 (each claim released at once and due again, so every claim
// finds work). No message is sent:
// this is the scheduler's own cost, apart from draining.

// claimCase is one shape of the ready set.
type claimCase struct {
	name string
	// active tenants with due conversations each; idle tenants with
	// nothing ready; waiting conversations (due in an hour) spread over the
	// active tenants.
	active, duePer, idle, waiting int
}

var claimCases = []claimCase{
	{name: "10 tenants × 100 due", active: 10, duePer: 100},
	{name: "1,000 tenants × 100 due", active: 1000, duePer: 100},
	{name: "10 tenants × 100 due + 990 idle tenants + 100,000 waiting", active: 10, duePer: 100, idle: 990, waiting: 100000},
}

// claimResult is the claim scenario's part of a result line.
type claimResult struct {
	Case          string  `json:"case"`
	ReadyRows     int     `json:"ready_rows"`
	ActiveTenants int     `json:"active_tenants"`
	WalkMS        float64 `json:"walk_ms"`      // one ActiveTenantsQuery, median
	ClaimUS       float64 `json:"claim_us"`     // one claim + release, median
	ClaimP99US    float64 `json:"claim_p99_us"` // … 99th percentile
	PerClaimUS    float64 `json:"per_claim_us"` // claim + its share of a walk per round
}

const (
	claimFill = `
WITH t AS (
    INSERT INTO ordo.tenants (slug) SELECT 'claim-' || g FROM generate_series(1, $1::int + $2::int) g RETURNING id
), c AS (
    INSERT INTO ordo.conversations (tenant_id, conversation_id, last_seq)
    SELECT t.id, 'c' || g, 1 FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM t) t, generate_series(1, $3::int) g
    WHERE t.n <= $1
    RETURNING id, tenant_id
)
INSERT INTO ordo.ready (conversation_pk, tenant_id) SELECT id, tenant_id FROM c`
	claimFillWaiting = `
WITH a AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS n FROM ordo.tenants WHERE slug LIKE 'claim-%'
           AND id IN (SELECT tenant_id FROM ordo.ready)),
c AS (
    INSERT INTO ordo.conversations (tenant_id, conversation_id, last_seq)
    SELECT a.id, 'w' || g, 1 FROM generate_series(0, $1::int - 1) g JOIN a ON a.n = g % (SELECT count(*) FROM a)
    RETURNING id, tenant_id
)
INSERT INTO ordo.ready (conversation_pk, tenant_id, due_at) SELECT id, tenant_id, now() + interval '1 hour' FROM c`
	claimOne     = `SELECT conv FROM ordo.claim($1, 0, 0, true, 0, NULL, NULL, NULL) LIMIT 1`
	claimRelease = `SELECT ordo.drain_unlock($1, 0)`
)

// runClaim measures every claim case.
func (b *benchEnv) runClaim(ctx context.Context, out io.Writer) ([]benchResult, error) {
	var results []benchResult
	for _, cc := range claimCases {
		r, err := b.claimCase(ctx, cc)
		if err != nil {
			return results, fmt.Errorf("claim / %s: %w", cc.name, err)
		}
		b.logf("claim / %s: walk %.2f ms, claim %.0f µs (p99 %.0f), %.0f µs per claim with its share of the walk",
			cc.name, r.Claim.WalkMS, r.Claim.ClaimUS, r.Claim.ClaimP99US, r.Claim.PerClaimUS)
		results = append(results, r)
		if err := cli.PrintJSON(out, r); err != nil {
			return results, err
		}
	}
	return results, nil
}

func (b *benchEnv) claimCase(ctx context.Context, cc claimCase) (benchResult, error) {
	_, url, drop, err := b.newDatabase(ctx, ordoTemplate)
	if err != nil {
		return benchResult{}, err
	}
	defer drop()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return benchResult{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, claimFill, cc.active, cc.idle, cc.duePer); err != nil {
		return benchResult{}, fmt.Errorf("fill: %w", err)
	}
	if cc.waiting > 0 {
		if _, err := conn.Exec(ctx, claimFillWaiting, cc.waiting); err != nil {
			return benchResult{}, fmt.Errorf("fill waiting: %w", err)
		}
	}
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE ordo.ready, ordo.tenants, ordo.conversations"); err != nil {
		return benchResult{}, err
	}

	var (
		walks, claims []float64
		tenantIDs     []int64
	)
	// A few rounds: each walks once and claims once from every active
	// tenant, as the scheduler's round does with weight 1.
	rounds := max(3, 3000/cc.active)
	for round := range rounds + 1 {
		start := time.Now()
		rows, _ := conn.Query(ctx, jobs.ActiveTenantsQuery, jobs.ReadyCountMax)
		ids, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (int64, error) {
			var (
				id     int64
				due    float64
				w, cap int
			)
			err := row.Scan(&id, &due, &w, &cap)
			return id, err
		})
		if err != nil {
			return benchResult{}, fmt.Errorf("walk: %w", err)
		}
		if round > 0 { // the first round warms the caches
			walks = append(walks, ms(time.Since(start)))
		}
		tenantIDs = ids
		for _, t := range tenantIDs {
			start := time.Now()
			var conv *int64
			if err := conn.QueryRow(ctx, claimOne, t).Scan(&conv); err != nil && err != pgx.ErrNoRows {
				return benchResult{}, fmt.Errorf("claim: %w", err)
			}
			if conv == nil {
				return benchResult{}, fmt.Errorf("tenant %d had nothing to claim", t)
			}
			if round > 0 {
				claims = append(claims, float64(time.Since(start))/float64(time.Microsecond))
			}
			if _, err := conn.Exec(ctx, claimRelease, *conv); err != nil {
				return benchResult{}, err
			}
		}
	}
	slices.Sort(walks)
	slices.Sort(claims)
	var ready int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM ordo.ready").Scan(&ready); err != nil {
		return benchResult{}, err
	}
	cr := &claimResult{
		Case: cc.name, ReadyRows: ready, ActiveTenants: len(tenantIDs),
		WalkMS: round2(percentile(walks, 50)), ClaimUS: round1(percentile(claims, 50)), ClaimP99US: round1(percentile(claims, 99)),
	}
	if len(tenantIDs) > 0 {
		cr.PerClaimUS = round1(cr.ClaimUS + cr.WalkMS*1000/float64(len(tenantIDs)))
	}
	return benchResult{Scenario: "claim", System: "ordo", Conversations: cc.active*cc.duePer + cc.waiting, Claim: cr}, nil
}

// printClaim writes the claim scenario's table.
func printClaim(w io.Writer, results []benchResult) {
	var rows []*claimResult
	for _, r := range results {
		if r.Claim != nil {
			rows = append(rows, r.Claim)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\nclaim: the scheduler's cost per claim as the ready set grows (one connection, nothing sent)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ready set\tready rows\twalk ms\tclaim µs p50\tp99\tper claim µs (with its share of the walk)\t")
	for _, c := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t%.0f\t%.0f\t\n", c.Case, c.ReadyRows, c.WalkMS, c.ClaimUS, c.ClaimP99US, c.PerClaimUS)
	}
	tw.Flush()
}
