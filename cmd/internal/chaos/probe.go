package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"
)

// chaosRejected is in every text of a request that must be refused: the
// provider receiving one means a refused request was stored after all.
const chaosRejected = "REJECTED"

// chaosProber offers bad input, interleaved with the load: each request must get
// the contract's error and store nothing, and the valid edge cases (ids of
// exactly 256 characters, SQL-looking strings) must be accepted and sent as
// they are.
type chaosProber struct {
	r      *run
	api    *chaosClient
	ledger *chaosLedger

	mu      sync.Mutex
	results map[string]*chaosProbeResult
	edge    []*chaosMsg // accepted edge messages of tenant A, for repeats
}

// chaosProbeResult sums up one case over the run.
type chaosProbeResult struct {
	runs, wrong int
	firstWrong  string
}

func newChaosProber(r *run, l *chaosLedger) *chaosProber {
	return &chaosProber{r: r, api: newChaosClient(r.apiURL), ledger: l, results: make(map[string]*chaosProbeResult)}
}

// chaosProbeCase is one kind of request and the answer it must get.
type chaosProbeCase struct {
	name string
	run  func(ctx context.Context, round int) error // nil: answered as the contract says
}

func (p *chaosProber) cases() []chaosProbeCase {
	a, b := 0, 1 // tenant A probes, tenant B is the other tenant
	keyA := "Bearer " + p.r.tenants[a].apiKey
	post := func(id, conv, text string) []byte {
		body, _ := json.Marshal(map[string]any{"message_id": id, "conversation_id": conv, "type": "text", "text": map[string]string{"body": text}})
		return body
	}
	// refused POSTs a request that must be answered want/code and leave no
	// message behind.
	refused := func(id, auth, contentType string, body []byte, want int, code string) chaosProbeCase {
		return chaosProbeCase{run: func(ctx context.Context, round int) error {
			if err := p.expect(ctx, http.MethodPost, "/v1/messages", auth, contentType, body, want, code); err != nil {
				return err
			}
			if id == "" {
				return nil
			}
			return p.expect(ctx, http.MethodGet, "/v1/messages/"+url.PathEscape(id), keyA, "", nil, http.StatusNotFound, "not_found")
		}}
	}
	id := func(kind string, round int) string { return fmt.Sprintf("bad-%s-%d", kind, round) }
	var cs []chaosProbeCase
	for _, c := range []struct {
		name, kind, contentType string
		body                    func(id string) []byte
		want                    int
		code                    string
	}{
		{"malformed JSON", "json", "application/json", func(id string) []byte { return []byte(`{"message_id": "` + id + `", "conversation_id": "edge",`) }, 400, "invalid_request"},
		{"JSON that is not an object", "array", "application/json", func(id string) []byte { return []byte(`["` + id + `"]`) }, 400, "invalid_request"},
		{"empty body", "", "application/json", func(string) []byte { return nil }, 400, "invalid_request"},
		{"oversized body", "big", "application/json", func(id string) []byte {
			return post(id, "edge", chaosRejected+" "+strings.Repeat("x", 1<<20))
		}, 413, "payload_too_large"},
		{"invalid UTF-8", "utf8", "application/json", func(id string) []byte {
			return []byte(`{"message_id":"` + id + `","conversation_id":"edge","type":"text","text":{"body":"` + chaosRejected + " \xff\xfe\xfd" + `"}}`)
		}, 400, "invalid_request"},
		{"not JSON (text/plain)", "ctype", "text/plain", func(id string) []byte { return post(id, "edge", chaosRejected) }, 415, "unsupported_media_type"},
		{"message_id of 257 characters", "", "application/json", func(string) []byte { return post(strings.Repeat("é", 257), "edge", chaosRejected) }, 400, "invalid_request"},
		{"conversation_id of 257 characters", "long-conv", "application/json", func(id string) []byte { return post(id, strings.Repeat("c", 257), chaosRejected) }, 400, "invalid_request"},
		{"control character in conversation_id", "ctl", "application/json", func(id string) []byte { return post(id, "edge\u0007", chaosRejected) }, 400, "invalid_request"},
		{"missing message_id", "", "application/json", func(string) []byte {
			return []byte(`{"conversation_id":"edge","type":"text","text":{"body":"` + chaosRejected + `"}}`)
		}, 400, "invalid_request"},
		{"unknown direction", "dir", "application/json", func(id string) []byte {
			return []byte(`{"message_id":"` + id + `","conversation_id":"edge","direction":"sideways","type":"text","text":{"body":"` + chaosRejected + `"}}`)
		}, 400, "invalid_request"},
		{"outbound message without type", "notype", "application/json", func(id string) []byte {
			return []byte(`{"message_id":"` + id + `","conversation_id":"edge","text":{"body":"` + chaosRejected + `"}}`)
		}, 400, "invalid_request"},
	} {
		cs = append(cs, chaosProbeCase{name: c.name, run: func(ctx context.Context, round int) error {
			mid := ""
			if c.kind != "" {
				mid = id(c.kind, round)
			}
			return refused(mid, keyA, c.contentType, c.body(mid), c.want, c.code).run(ctx, round)
		}})
	}
	wrongKey := keyA[:len(keyA)-1] + "A" // the right key, its last character changed
	if strings.HasSuffix(keyA, "A") {
		wrongKey = keyA[:len(keyA)-1] + "B"
	}
	for _, c := range []struct{ name, auth string }{
		{"missing API key", ""},
		{"wrong API key", wrongKey},
		{"not a Bearer key", "Basic " + strings.TrimPrefix(keyA, "Bearer ")},
		{"empty Bearer key", "Bearer "},
	} {
		cs = append(cs, chaosProbeCase{name: c.name, run: func(ctx context.Context, round int) error {
			mid := id("auth", round)
			return refused(mid, c.auth, "application/json", post(mid, "edge", chaosRejected), 401, "unauthorized").run(ctx, round)
		}})
	}

	// Tenant isolation: A's key does not reach B's conversation or message,
	// which B's own key does.
	cs = append(cs, chaosProbeCase{name: "other tenant's conversation and message", run: func(ctx context.Context, round int) error {
		m := p.acceptedOf(b)
		if m == nil {
			return nil // nothing of B's accepted yet
		}
		keyB := "Bearer " + p.r.tenants[b].apiKey
		conv, msg := "/v1/conversations/"+url.PathEscape(m.conv), "/v1/messages/"+url.PathEscape(m.id)
		for _, c := range []struct {
			path, auth string
			want       int
		}{{conv, keyB, 200}, {msg, keyB, 200}, {conv, keyA, 404}, {msg, keyA, 404}} {
			code := ""
			if c.want == 404 {
				code = "not_found"
			}
			if err := p.expect(ctx, http.MethodGet, c.path, c.auth, "", nil, c.want, code); err != nil {
				return err
			}
		}
		return nil
	}})
	cs = append(cs, chaosProbeCase{name: "SQL-looking id in a lookup", run: func(ctx context.Context, round int) error {
		return p.expect(ctx, http.MethodGet, "/v1/messages/"+url.PathEscape("' OR '1'='1"), keyA, "", nil, 404, "not_found")
	}})

	// Valid edge cases: accepted, recorded in the ledger, checked like the load.
	accept := func(name string, tenant int, msgID, conv, text string) chaosProbeCase {
		return chaosProbeCase{name: name, run: func(ctx context.Context, round int) error {
			m := &chaosMsg{tenant: tenant, conv: conv, id: fmt.Sprintf(msgID, round), text: fmt.Sprintf(text, round)}
			m.body = post(m.id, m.conv, m.text)
			return p.accept(ctx, m)
		}}
	}
	cs = append(cs,
		accept("message_id of 256 characters", a, "edge-%04d-"+strings.Repeat("é", 246), "edge", "edge long id %d"),
		accept("conversation_id of 256 characters", a, "edge-long-conv-%d", strings.Repeat("c", 256), "edge long conversation %d"),
		accept("SQL-looking id and text", a, "edge-%d'; DROP TABLE ordo.messages; --", "edge", `edge %d '); DELETE FROM ordo.steps WHERE ('1'='1`),
		chaosProbeCase{name: "the same message_id in another tenant", run: func(ctx context.Context, round int) error {
			m := p.lastEdge()
			if m == nil {
				return nil
			}
			o := &chaosMsg{tenant: b, conv: "edge", id: m.id, text: fmt.Sprintf("edge of tenant B %d", round)}
			o.body = post(o.id, o.conv, o.text)
			return p.accept(ctx, o)
		}},
		chaosProbeCase{name: "a repeat with a different body", run: func(ctx context.Context, round int) error {
			m := p.lastEdge()
			if m == nil {
				return nil
			}
			// Same message_id, another text: 422 message_id_reused, and
			// the other text is never sent (an unexpected send if it were).
			return p.expect(ctx, http.MethodPost, "/v1/messages", keyA, "application/json",
				post(m.id, m.conv, fmt.Sprintf("%s repeat %d", chaosRejected, round)), http.StatusUnprocessableEntity, "message_id_reused")
		}},
	)
	return cs
}

// run goes through the cases, over and over, until loadCtx ends.
func (p *chaosProber) Stress(loadCtx, answerCtx context.Context) {
	cases := p.cases()
	for round := 1; ; round++ {
		for _, c := range cases {
			select {
			case <-loadCtx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			err := c.run(answerCtx, round)
			p.mu.Lock()
			res := p.results[c.name]
			if res == nil {
				res = &chaosProbeResult{}
				p.results[c.name] = res
			}
			res.runs++
			if err != nil {
				res.wrong++
				if res.firstWrong == "" {
					res.firstWrong = err.Error()
				}
			}
			p.mu.Unlock()
		}
	}
}

// expect sends a request until it is answered with a non-5xx status, and
// compares the answer with want and, if given, the error code.
func (p *chaosProber) expect(ctx context.Context, method, path, auth, contentType string, body []byte, want int, code string) error {
	var (
		status int
		answer []byte
		err    error
	)
	// A minute of 5xx or errors: longer than a Postgres outage (PGAway).
	for deadline := time.Now().Add(time.Minute); ; {
		status, answer, err = p.api.do(ctx, method, path, auth, contentType, body)
		if err == nil && status < 500 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s %s: no answer but 5xx or errors (last %d, %v)", method, path, status, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if want == http.StatusUnauthorized && status == http.StatusTooManyRequests {
		// The contract answers repeated failed authentication from one
		// client with 429 (rate_limited) instead: just as refused.
		want, code = status, "rate_limited"
	}
	if status != want {
		return fmt.Errorf("%s %s: want %d, got %d %.200s", method, chaosShortPath(path), want, status, answer)
	}
	if code != "" {
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(answer, &e) != nil || e.Error.Code != code || e.Error.Message == "" {
			return fmt.Errorf("%s %s: want error code %q with a message, got %.200s", method, chaosShortPath(path), code, answer)
		}
	}
	return nil
}

// accept offers a valid edge message like a client does, recording it.
func (p *chaosProber) accept(ctx context.Context, m *chaosMsg) error {
	p.ledger.offer(m)
	l := &chaosLoad{r: p.r, api: p.api, ledger: p.ledger}
	if !l.deliver(ctx, m, 1, false) {
		return fmt.Errorf("%.60s: no answer", m.id)
	}
	p.ledger.mu.Lock()
	ok := m.accepted
	p.ledger.mu.Unlock()
	if !ok {
		return fmt.Errorf("%.60s: refused", m.id)
	}
	if m.tenant == 0 && m.conv == "edge" {
		p.mu.Lock()
		p.edge = append(p.edge, m)
		p.mu.Unlock()
	}
	return nil
}

func (p *chaosProber) lastEdge() *chaosMsg {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.edge) == 0 {
		return nil
	}
	return p.edge[len(p.edge)-1]
}

// acceptedOf returns an accepted message of tenant t from the load, in a
// conversation whose id no other tenant uses.
func (p *chaosProber) acceptedOf(t int) *chaosMsg {
	shared := map[string]bool{"edge": true}
	for j := 1; j <= 3; j++ {
		shared[chaosConversationID(t, j)] = true
	}
	for _, m := range p.ledger.accepted() {
		if m.tenant == t && !shared[m.conv] {
			return m
		}
	}
	return nil
}

// Counts is the bad requests sent and the ones answered wrong.
func (p *chaosProber) Counts() map[string]int {
	out := map[string]int{}
	for _, s := range p.summary() {
		out["requests"] += s.runs
		out["wrong"] += s.wrong
	}
	return out
}

// summary lists each case with its counts, in name order.
func (p *chaosProber) summary() []chaosProbeSummary {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []chaosProbeSummary
	for name, r := range p.results {
		out = append(out, chaosProbeSummary{name: name, chaosProbeResult: *r})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// chaosProbeSummary is one case's result for the report.
type chaosProbeSummary struct {
	name string
	chaosProbeResult
}

func chaosShortPath(p string) string {
	if len(p) > 60 {
		return p[:60] + "…"
	}
	return p
}
