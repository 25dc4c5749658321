package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// faultOperatorResolve is an operator replaying or skipping a dead letter
// while its conversation is busy.
const faultOperatorResolve = "operator_resolve"

// resolveWait bounds the wait for an open dead letter to resolve.
const resolveWait = 20 * time.Second

// operatorResolveKind resolves OperatorResolves dead letters, replay and
// skip alternating from the seed.
var operatorResolveKind = faultKind{
	name: faultOperatorResolve,
	plan: func(p *planner) []fault {
		return p.place(p.cfg.OperatorResolves, p.cfg.Duration-resolveWait-5*time.Second,
			func() time.Duration { return 0 },
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
// busy with sends: the provider holds its answers back a moment, as for a
// stall, so drains are mid-send. The contract: replay and skip never take
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
	var d struct {
		ID             string `json:"id"`
		Tenant         string `json:"tenant"`
		MessageID      string `json:"message_id"`
		ConversationID string `json:"conversation_id"`
	}
	for deadline := time.Now().Add(resolveWait); ; {
		out, err := r.ordo(ctx, nil, "dead-letters", "list", "--state", "open")
		if err != nil {
			r.log.printf("dead-letter %s skipped: %v", action, err)
			return false
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for d.ID == "" && sc.Scan() {
			_ = json.Unmarshal(sc.Bytes(), &d)
		}
		if d.ID != "" {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.log.printf("dead-letter %s skipped: no open dead letter within %s", action, resolveWait)
			return false
		}
		time.Sleep(time.Second)
	}
	tenant := -1
	for i, t := range r.tenants {
		if t.slug == d.Tenant {
			tenant = i
		}
	}
	from := time.Now()
	r.provider.slowDown(from.Add(deployHold+time.Second), deployHold)
	time.Sleep(deployHold / 2)
	term := time.Now()
	if _, err := r.ordo(ctx, nil, "dead-letters", action, "--id", d.ID); err != nil {
		r.log.printf("dead-letter %s %s: %v", action, d.ID, err)
		return false
	}
	r.recordResolution(tenant, d.ConversationID, d.MessageID, done)
	r.log.fault(faultOperatorResolve, "ordo dead-letters %s --id %s (%s, conversation %.40q) while the provider holds answers %s",
		action, d.ID, d.Tenant, d.ConversationID, deployHold)
	// The window runs until every held answer went out: a drain fenced out
	// by the command finds out when its send is answered.
	r.settleHold()
	r.recordWindow(faultWindow{kind: faultOperatorResolve, what: "dead letter " + d.ID + " was " + done, from: from, term: term, exit: time.Now()})
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
