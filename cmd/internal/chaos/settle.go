package chaos

// What the run reads once the load has stopped: whether the system settled,
// ordo's own view of every message, its dead letters and its count of
// ambiguous sends.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// quiesce waits until every accepted message was sent or permanently failed
// and dead-lettered, or cfg.Quiesce passes.
func (r *run) quiesce(ctx context.Context, l *chaosLedger) (bool, time.Duration) {
	start := time.Now()
	deadline := start.Add(r.cfg.Quiesce)
	for {
		pending := chaosOutstanding(l, r.provider.Sends(), r.provider.record())
		if pending == 0 {
			dl, err := r.deadLetters(ctx)
			if err == nil && len(dl) == len(l.permanentMessages()) {
				r.log.printf("settled after %s", time.Since(start).Round(time.Millisecond))
				return true, time.Since(start)
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.log.printf("not settled after %s: %d messages neither sent nor failed permanently", r.cfg.Quiesce, pending)
			return false, time.Since(start)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// engineView waits, until deadline, for ordo's API to show every accepted
// message finished — done, or dead for the ones the provider failed for
// good — and returns the ones it does not. The provider's side can be
// complete a little before ordo has written down the last outcomes (a
// worker killed after a send is re-driven seconds later).
func (r *run) engineView(ctx context.Context, l *chaosLedger, deadline time.Time) []string {
	api := newChaosClient(r.apiURL)
	todo := l.accepted()
	for {
		var (
			mu    sync.Mutex
			left  []string
			again []*chaosMsg
			wg    sync.WaitGroup
			slots = make(chan struct{}, 16)
		)
		for _, m := range todo {
			wg.Add(1)
			slots <- struct{}{}
			go func() {
				defer func() { <-slots; wg.Done() }()
				want := "done"
				if m.permanent() || m.failsLater() {
					want = "dead"
				}
				if r.resolution(m.tenant, m.id) == "skipped" {
					want = "skipped"
				}
				status, body, err := api.do(ctx, http.MethodGet, "/v1/messages/"+url.PathEscape(m.id), "Bearer "+r.tenants[m.tenant].apiKey, "", nil)
				var got struct {
					Status string `json:"status"`
				}
				if err == nil && status == http.StatusOK && json.Unmarshal(body, &got) == nil && got.Status == want {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				again = append(again, m)
				if err != nil {
					left = append(left, fmt.Sprintf("%.60q: %v", m.id, err))
				} else {
					left = append(left, fmt.Sprintf("%.60q: %d, status %q, want %q", m.id, status, got.Status, want))
				}
			}()
		}
		wg.Wait()
		if len(again) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			sort.Strings(left)
			return left
		}
		todo = again
		time.Sleep(time.Second)
	}
}

// ambiguousCounts reads the engine's own count of ambiguous sends per step
// (the step id is the callback data of each send): the one figure the
// checker takes from ordo, to excuse exactly that many duplicates.
func (r *run) ambiguousCounts(ctx context.Context) (map[string]int, error) {
	pool, err := pgxpool.New(ctx, r.dbURL)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	rows, err := pool.Query(ctx, `SELECT id::text, ambiguous_count FROM ordo.steps WHERE ambiguous_count > 0`)
	if err != nil {
		return nil, fmt.Errorf("read ambiguous counts: %w", err)
	}
	defer rows.Close()
	out := make(map[string]int)
	for rows.Next() {
		var (
			id string
			n  int
		)
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}

// chaosDeadLetter names a dead letter by its tenant and message.
type chaosDeadLetter struct {
	tenant    int
	messageID string
}

// deadLetters lists every tenant's dead-lettered messages through the API,
// as a tenant would see them, each once (resolved ones included).
func (r *run) deadLetters(ctx context.Context) ([]chaosDeadLetter, error) {
	api := newChaosClient(r.apiURL)
	var out []chaosDeadLetter
	seen := make(map[chaosDeadLetter]bool)
	for i, t := range r.tenants {
		after := "0"
		for {
			status, body, err := api.do(ctx, http.MethodGet, "/v1/dead-letters?state=all&limit=500&after="+after, "Bearer "+t.apiKey, "", nil)
			if err != nil {
				return nil, err
			}
			if status != http.StatusOK {
				return nil, fmt.Errorf("GET /v1/dead-letters: %d %.200s", status, body)
			}
			var page struct {
				DeadLetters []struct {
					ID        string `json:"id"`
					MessageID string `json:"message_id"`
				} `json:"dead_letters"`
			}
			if err := json.Unmarshal(body, &page); err != nil {
				return nil, fmt.Errorf("GET /v1/dead-letters: %w", err)
			}
			for _, d := range page.DeadLetters {
				// A replayed message that fails again has a second dead
				// letter: the checker counts messages.
				if dl := (chaosDeadLetter{tenant: i, messageID: d.MessageID}); !seen[dl] {
					seen[dl] = true
					out = append(out, dl)
				}
				after = d.ID
			}
			if len(page.DeadLetters) < 500 {
				break
			}
		}
	}
	return out, nil
}
