package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// faultOperatorResolve is an operator replaying or skipping a dead letter
// while its conversation is busy.
const faultOperatorResolve = "operator_resolve"

// resolveWait bounds the wait for an open dead letter whose conversation
// is busy; the fault runs alone meanwhile, so it is short.
const resolveWait = 8 * time.Second

// resolveQuiet is how long the fault still runs alone after its window:
// a send first delivered inside the window has its answer recorded before
// another process fault (a stall, a kill, a partition) can cut the drain
// off and make it resend — a duplicate the checker would lay at the
// replay's door. Under a loaded machine a recording can take a second or
// more.
const resolveQuiet = 3 * time.Second

// operatorResolveKind resolves OperatorResolves dead letters, replay and
// skip alternating from the seed.
var operatorResolveKind = faultKind{
	name: faultOperatorResolve,
	plan: func(p *planner) []fault {
		return p.place(p.cfg.OperatorResolves, p.cfg.Duration-resolveWait-5*time.Second,
			func() time.Duration { return resolveQuiet },
			func(s slot) fault { return &operatorResolve{s: s, skip: s.target%2 == 1} })
	},
	summary: func(n int) string {
		if n == 0 {
			return ""
		}
		return fmt.Sprintf("%d dead-letter replays or skips", n)
	},
}

// operatorResolve is `ordo dead-letters replay|skip --id N` run while the
// dead letter's conversation has moved on (every chaos tenant skips) and is
// busy: the provider holds its answers back, as for a stall, and the
// operator picks an open dead letter whose conversation has a step in
// flight (within resolveWait; else any open one, and the log says so). The contract: replay and skip never take
// over a conversation they do not need to, so they cause no duplicate (the
// checker judges sends first delivered in the window), and the replayed
// message, failing for good again, is a dead letter again; the skipped one
// shows as skipped.
type operatorResolve struct {
	s    slot
	skip bool
}

func (f *operatorResolve) Kind() string { return faultOperatorResolve }
func (f *operatorResolve) Desc() string {
	if f.skip {
		return "ordo dead-letters skip, its conversation busy"
	}
	return "ordo dead-letters replay, its conversation busy"
}
func (f *operatorResolve) slot() slot { return f.s }

// exclusive: a duplicate inside the window is the operator's doing.
func (f *operatorResolve) exclusive() {}

// Inject waits for an open dead letter, then resolves it through the
// operator's command while the provider holds answers back.
func (f *operatorResolve) Inject(ctx context.Context, r *run) bool {
	action, done := "replay", "replayed"
	if f.skip {
		action, done = "skip", "skipped"
	}
	type deadLetter struct {
		ID             string `json:"id"`
		Tenant         string `json:"tenant"`
		MessageID      string `json:"message_id"`
		ConversationID string `json:"conversation_id"`
		Reason         string `json:"reason"`
	}
	// Answers are held back from now on, so that sends are in flight; the
	// operator waits for a dead letter whose conversation has one.
	r.provider.slowDown(time.Now().Add(resolveWait), deployHold)
	var (
		d        deadLetter
		busy     bool
		open     []deadLetter
		listed   time.Time
		deadline = time.Now().Add(resolveWait)
	)
	for !busy {
		if time.Since(listed) > time.Second {
			out, err := r.ordo(ctx, nil, "dead-letters", "list", "--state", "open")
			if err != nil {
				r.log.printf("dead-letter %s skipped: %v", action, err)
				r.provider.slowDown(time.Time{}, 0)
				return false
			}
			open, listed = open[:0], time.Now()
			sc := bufio.NewScanner(bytes.NewReader(out))
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				var dl deadLetter
				// A message Meta reported failed after it was taken was
				// delivered once: a replay would deliver it again, which
				// the checker would count as a duplicate. Only the
				// provider's own refusals are resolved.
				if json.Unmarshal(sc.Bytes(), &dl) == nil && dl.ID != "" && !strings.HasPrefix(dl.Reason, "delivery failed") {
					open = append(open, dl)
				}
			}
		}
		inFlight := r.sendingConversations(ctx)
		for _, dl := range open {
			if inFlight[dl.Tenant+"\x00"+dl.ConversationID] {
				d, busy = dl, true
				break
			}
		}
		if busy {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if len(open) == 0 {
				r.log.printf("dead-letter %s skipped: no open dead letter within %s", action, resolveWait)
				r.provider.slowDown(time.Time{}, 0)
				return false
			}
			d = open[0] // none busy: resolve one anyway
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	tenant := -1
	for i, t := range r.tenants {
		if t.slug == d.Tenant {
			tenant = i
		}
	}
	term := time.Now()
	_, err := r.ordo(ctx, nil, "dead-letters", action, "--id", d.ID)
	r.provider.slowDown(time.Now().Add(deployHold), deployHold) // held answers still go out late
	if err != nil {
		r.log.printf("dead-letter %s %s: %v", action, d.ID, err)
		r.settleHold()
		return false
	}
	state := "busy: a send in flight"
	if !busy {
		state = "idle: none of the open ones was busy within " + resolveWait.String()
	}
	r.recordResolution(tenant, d.ConversationID, d.MessageID, done)
	r.log.fault(faultOperatorResolve, "ordo dead-letters %s --id %s (%s, conversation %.40q, %s)",
		action, d.ID, d.Tenant, d.ConversationID, state)
	// The window runs until every held answer went out: a drain fenced out
	// by the command finds out when its send is answered.
	r.settleHold()
	r.recordWindow(faultWindow{kind: faultOperatorResolve, what: "dead letter " + d.ID + " was " + done, from: term.Add(-deployHold), term: term, exit: time.Now()})
	return true
}

// Recover has nothing to put back.
func (f *operatorResolve) Recover(context.Context, *run) {}

// recordResolution notes what the operator did to a message, for ordo's
// view of it afterwards (settle.go).
func (r *run) recordResolution(tenant int, conv, messageID, resolution string) {
	r.windowMu.Lock()
	defer r.windowMu.Unlock()
	if r.resolutions == nil {
		r.resolutions, r.replays = make(map[string]string), make(map[chaosConvKey]int)
	}
	if resolution == "replayed" {
		r.replays[chaosConvKey{tenant, conv}]++
	}
	r.resolutions[fmt.Sprint(tenant)+"\x00"+messageID] = resolution
}

// replaysPer returns the replays per conversation, for the checker.
func (r *run) replaysPer() map[chaosConvKey]int {
	r.windowMu.Lock()
	defer r.windowMu.Unlock()
	out := make(map[chaosConvKey]int, len(r.replays))
	for k, n := range r.replays {
		out[k] = n
	}
	return out
}

// resolution is what the operator did to a message: "", replayed, skipped.
func (r *run) resolution(tenant int, messageID string) string {
	r.windowMu.Lock()
	defer r.windowMu.Unlock()
	return r.resolutions[fmt.Sprint(tenant)+"\x00"+messageID]
}

// sendingQuery lists the conversations with a step in flight.
const sendingQuery = `
SELECT DISTINCT t.slug, c.conversation_id
FROM ordo.steps s JOIN ordo.messages m ON m.id = s.message_pk
JOIN ordo.conversations c ON c.id = m.conversation_pk JOIN ordo.tenants t ON t.id = c.tenant_id
WHERE s.status = 'running'`

// sendingConversations returns the conversations (tenant slug and id) with
// a step in flight now; empty if the database cannot tell.
func (r *run) sendingConversations(ctx context.Context) map[string]bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.dbURL)
	if err != nil {
		return nil
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, _ := conn.Query(ctx, sendingQuery)
	out := make(map[string]bool)
	var slug, conv string
	_, _ = pgx.ForEachRow(rows, []any{&slug, &conv}, func() error {
		out[slug+"\x00"+conv] = true
		return nil
	})
	return out
}
