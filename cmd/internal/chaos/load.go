package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// chaosMsg is one message a client offers, and what it was answered.
type chaosMsg struct {
	tenant  int
	conv    string
	id      string
	inbound bool
	webhook bool // an end user's message, coming as Meta's webhook (its id is a wamid)
	text    string
	body    []byte
	offered time.Time // when the ledger first heard of it

	// Set by the ledger, under its lock.
	accepted bool
	seq      int64
	ordoID   string
	created  int // 202 answers: at most one, or the message was accepted twice
	answers  int
	mismatch int // answers that disagree with the first on id or conversation
	reseq    int // answers with another seq than the first's
	copies   int // copies offered so far (late ones included): numbers each copy's tries
	// tries is every try of every copy, in the order they ended: what the
	// checker prints for a message it fails (which answer disagreed, when,
	// in which fault's window).
	tries []chaosTry
}

// permanent reports whether the provider fails this message's send for good.
func (m *chaosMsg) permanent() bool {
	return !m.inbound && strings.Contains(m.text, chaosUndeliverable)
}

// failsLater reports whether Meta reports this message's send failed after
// the provider took it.
func (m *chaosMsg) failsLater() bool {
	return !m.inbound && strings.Contains(m.text, chaosFailsLater)
}

// want is the texts the provider must receive for m, in order: the text of
// an outbound message, the handler's replies to an inbound one, nothing for
// a permanently failing one.
func (m *chaosMsg) want() []string {
	switch {
	case m.inbound:
		return chaosReplies(m.text)
	case m.permanent():
		return nil
	}
	return []string{m.text}
}

// chaosConvKey names a conversation across tenants.
type chaosConvKey struct {
	tenant int
	conv   string
}

// chaosLedger is the clients' record: every message offered and what it was
// answered. With the provider's record it is all the checker reads.
type chaosLedger struct {
	pnids []string // phone_number_id per tenant

	mu         sync.Mutex
	msgs       []*chaosMsg
	order      map[chaosConvKey][]*chaosMsg // accepted messages per conversation, in the order the clients were answered
	offers     map[chaosConvKey][]*chaosMsg // offered messages per conversation: one at a time, so in seq order
	byText     map[string]*chaosMsg         // chaosSendKey of each text a message may send → the message
	byID       map[string]*chaosMsg         // tenant index and message_id → the message
	copies     int
	retries    int
	rejected   []string // a valid offer answered 4xx
	unanswered int      // copies that never got an answer
	acks       []chaosAck
}

// chaosAck is one 2xx answer: when its request was sent and when the
// answer came (the failover faults' recovery times are read from them).
type chaosAck struct {
	sent, at time.Time
}

// ack records a 2xx answer to a request sent at sent.
func (l *chaosLedger) ack(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acks = append(l.acks, chaosAck{sent: sent, at: time.Now()})
}

// acked returns the 2xx answers so far.
func (l *chaosLedger) acked() []chaosAck {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]chaosAck(nil), l.acks...)
}

func newChaosLedger(pnids []string) *chaosLedger {
	return &chaosLedger{pnids: pnids, order: make(map[chaosConvKey][]*chaosMsg), offers: make(map[chaosConvKey][]*chaosMsg),
		byText: make(map[string]*chaosMsg), byID: make(map[string]*chaosMsg)}
}

// offer records a new message, before its first copy is sent. A
// conversation's next message is offered only once this one is answered.
func (l *chaosLedger) offer(m *chaosMsg) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if m.offered.IsZero() {
		m.offered = time.Now()
	}
	l.msgs = append(l.msgs, m)
	k := chaosConvKey{m.tenant, m.conv}
	l.offers[k] = append(l.offers[k], m)
	for _, t := range append(m.want(), m.text) {
		l.byText[chaosSendKey(l.pnids[m.tenant], m.conv, t)] = m
	}
	l.byID[fmt.Sprint(m.tenant)+"\x00"+m.id] = m
}

// offeredAt is when the message that may send the text of sendKey was
// offered.
func (l *chaosLedger) offeredAt(sendKey string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.byText[sendKey]
	if m == nil || m.offered.IsZero() {
		return time.Time{}, false
	}
	return m.offered, true
}

// startedEarly judges the first request for a text (a send, or with text ""
// the handler call of message id): every message before it in its
// conversation, and the replies before it in its message, must be settled
// by then — sent, or failed for good. It names what was not, or says "".
func (l *chaosLedger) startedEarly(sendKey string, tenant int, id string, settled func(key, text string) bool) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.byText[sendKey]
	if sendKey == "" {
		m = l.byID[fmt.Sprint(tenant)+"\x00"+id]
	}
	if m == nil {
		return "" // not ours: the unexpected-send check speaks for it
	}
	pnid := l.pnids[m.tenant]
	for _, p := range l.offers[chaosConvKey{m.tenant, m.conv}] {
		if p == m {
			break
		}
		if p.permanent() {
			if !settled(chaosSendKey(pnid, p.conv, p.text), p.text) {
				return fmt.Sprintf("%.60q (seq %d) started before %.60q (seq %d) was failed for good", m.id, m.seq, p.id, p.seq)
			}
			continue
		}
		for _, t := range p.want() {
			if !settled(chaosSendKey(pnid, p.conv, t), t) {
				return fmt.Sprintf("%.60q (seq %d) started before %.60q of %.60q (seq %d) was sent", m.id, m.seq, t, p.id, p.seq)
			}
		}
	}
	for _, t := range m.want() {
		if sendKey == "" || chaosSendKey(pnid, m.conv, t) == sendKey {
			break
		}
		if !settled(chaosSendKey(pnid, m.conv, t), t) {
			return fmt.Sprintf("a reply of %.60q started before %.60q was sent", m.id, t)
		}
	}
	return ""
}

// chaosAnswer is the 2xx body of POST /v1/messages.
type chaosAnswer struct {
	ID             string `json:"id"`
	MessageID      string `json:"message_id"`
	ConversationID string `json:"conversation_id"`
	Seq            int64  `json:"seq"`
	Duplicate      bool   `json:"duplicate"`
}

// answer records a 2xx answer to m.
func (l *chaosLedger) answer(m *chaosMsg, status int, a chaosAnswer) {
	l.answerTry(m, status, a, chaosTry{})
}

// answerTry records a 2xx answer to m, and t, the try it ended (its copy
// and times).
func (l *chaosLedger) answerTry(m *chaosMsg, status int, a chaosAnswer, t chaosTry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	odd := false
	defer func() {
		t.status, t.answer, t.odd = status, a, odd
		m.tries = append(m.tries, t)
	}()
	m.answers++
	if status == http.StatusAccepted {
		m.created++
	}
	if (status == http.StatusAccepted) == a.Duplicate || a.MessageID != m.id || a.ConversationID != m.conv {
		m.mismatch++
		odd = true
	}
	if !m.accepted {
		m.accepted, m.seq, m.ordoID = true, a.Seq, a.ID
		k := chaosConvKey{m.tenant, m.conv}
		l.order[k] = append(l.order[k], m)
		return
	}
	switch {
	case a.ID != m.ordoID:
		m.mismatch++
		odd = true
	case a.Seq != m.seq:
		m.reseq++ // an operator's replay moves a message to its conversation's end
	}
}

// tried records a try of m that got no 2xx: a transport error, a 5xx or a
// 429 (retried), or a refusal.
func (l *chaosLedger) tried(m *chaosMsg, t chaosTry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m.tries = append(m.tries, t)
}

// newCopy numbers the next copy of m.
func (l *chaosLedger) newCopy(m *chaosMsg) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	m.copies++
	return m.copies
}

// chaosWebhookAnswer is the 200 body of a webhook delivery.
type chaosWebhookAnswer struct {
	Accepted   int `json:"accepted"`
	Duplicates int `json:"duplicates"`
}

// answerWebhook records a delivery of m's webhook answered 200: it holds m
// alone, so it must say m was accepted now or before. No seq comes back.
func (l *chaosLedger) answerWebhook(m *chaosMsg, a chaosWebhookAnswer) {
	l.answerWebhookTry(m, a, chaosTry{})
}

// answerWebhookTry is answerWebhook with the try it ended.
func (l *chaosLedger) answerWebhookTry(m *chaosMsg, a chaosWebhookAnswer, t chaosTry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t.status, t.answer.MessageID, t.answer.Duplicate, t.odd = http.StatusOK, m.id, a.Duplicates == 1, a.Accepted+a.Duplicates != 1
	m.tries = append(m.tries, t)
	m.answers++
	m.created += a.Accepted
	if a.Accepted+a.Duplicates != 1 {
		m.mismatch++
	}
	if !m.accepted {
		m.accepted = true
		k := chaosConvKey{m.tenant, m.conv}
		l.order[k] = append(l.order[k], m)
	}
}

func (l *chaosLedger) reject(m *chaosMsg, status int, body []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rejected = append(l.rejected, fmt.Sprintf("%s: %d %s", m.id, status, bytes.TrimSpace(body)))
}

func (l *chaosLedger) count(copies, retries, unanswered int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.copies += copies
	l.retries += retries
	l.unanswered += unanswered
}

// Counts is the messages offered, their copies, and the retries after
// errors.
func (l *chaosLoad) Counts() map[string]int {
	l.ledger.mu.Lock()
	defer l.ledger.mu.Unlock()
	return map[string]int{"messages": len(l.ledger.msgs), "copies": l.ledger.copies, "retries": l.ledger.retries}
}

// accepted returns the accepted messages.
func (l *chaosLedger) accepted() []*chaosMsg {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*chaosMsg
	for _, m := range l.msgs {
		if m.accepted {
			out = append(out, m)
		}
	}
	return out
}

// permanentMessages returns the accepted messages that must end as dead
// letters: the provider fails them for good, or Meta reports them failed.
func (l *chaosLedger) permanentMessages() []*chaosMsg {
	var out []*chaosMsg
	for _, m := range l.accepted() {
		if m.permanent() || m.failsLater() {
			out = append(out, m)
		}
	}
	return out
}

// chaosClient talks to the API process like n8n's HTTP Request node would.
type chaosClient struct {
	base string
	http *http.Client
	// observe, if set, is shown every answer (the Postgres outage notes them).
	observe func(*http.Response)
}

func newChaosClient(base string) *chaosClient {
	return &chaosClient{base: base, http: &http.Client{
		Timeout:   15 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
	}}
}

// do sends one request; auth is the whole Authorization header ("" for none).
func (c *chaosClient) do(ctx context.Context, method, path, auth, contentType string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return c.send(req)
}

// send sends req and reads the answer.
func (c *chaosClient) send(req *http.Request) (int, []byte, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if c.observe != nil {
		c.observe(resp)
	}
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, out, nil
}

// offerCopy posts one copy of m until it gets an answer: a connection error,
// a timeout or a 5xx says nothing about whether m was accepted, so the same
// message_id goes again, which the dedupe makes safe. False if ctx ended
// first.
// The body is m's unless another is given.
func (l *chaosLoad) offerCopy(ctx context.Context, m *chaosMsg, body []byte) (retries int, answered bool) {
	began := time.Now()
	defer func() {
		if answered {
			l.r.latency.add(m.webhook, began)
		}
	}()
	auth := "Bearer " + l.r.tenants[m.tenant].apiKey
	if body == nil {
		body = m.body
	}
	copyN := l.ledger.newCopy(m)
	for {
		var (
			status int
			answer []byte
			err    error
			sent   = time.Now()
		)
		if m.webhook {
			status, answer, err = l.api.postWebhook(ctx, l.r.tenants[m.tenant].slug, body)
		} else {
			status, answer, err = l.api.do(ctx, http.MethodPost, "/v1/messages", auth, "application/json", body)
		}
		if err == nil && status >= 200 && status < 300 {
			l.ledger.ack(sent)
		}
		t := chaosTry{copy: copyN, try: retries + 1, sent: sent, at: time.Now(), status: status}
		switch {
		case err != nil:
			t.err = err.Error()
		case status < 200 || status >= 300:
			t.err = string(bytes.TrimSpace(answer))
		}
		switch {
		case err == nil && m.webhook && status == http.StatusOK:
			var a chaosWebhookAnswer
			if json.Unmarshal(answer, &a) != nil {
				l.ledger.reject(m, status, answer)
				l.ledger.tried(m, t)
			} else {
				l.ledger.answerWebhookTry(m, a, t)
			}
			return retries, true
		case err == nil && status >= 200 && status < 300:
			var a chaosAnswer
			if json.Unmarshal(answer, &a) != nil {
				l.ledger.reject(m, status, answer)
				l.ledger.tried(m, t)
			} else {
				l.ledger.answerTry(m, status, a, t)
			}
			return retries, true
		case err == nil && status < 500 && status != http.StatusTooManyRequests:
			l.ledger.reject(m, status, answer)
			l.ledger.tried(m, t)
			return retries, true
		}
		l.ledger.tried(m, t)
		retries++
		select {
		case <-ctx.Done():
			return retries, false
		case <-time.After(time.Duration(50+rand.IntN(200)) * time.Millisecond):
		}
	}
}

// deliver offers m in copies (1 to 3), one after another or all at once, and
// returns once each copy was answered or ctx ended.
func (l *chaosLoad) deliver(ctx context.Context, m *chaosMsg, copies int, concurrent bool) bool {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		retries int
		missing int
	)
	one := func() {
		r, ok := l.offerCopy(ctx, m, nil)
		mu.Lock()
		retries += r
		if !ok {
			missing++
		}
		mu.Unlock()
	}
	for range copies {
		if concurrent {
			wg.Add(1)
			go func() { defer wg.Done(); one() }()
		} else {
			one()
		}
	}
	wg.Wait()
	l.ledger.count(copies, retries, missing)
	return missing == 0
}

// chaosConv is a conversation and the number of its next message.
type chaosConv struct {
	tenant  int
	index   int
	id      string
	next    int
	webhook bool // its messages come from the end user, as webhooks
}

// chaosLoad is the clients: each owns a share of the conversations and offers
// their messages one at a time, in order, each in 1 to 3 copies.
type chaosLoad struct {
	r      *run
	api    *chaosClient
	ledger *chaosLedger
	convs  []*chaosConv
}

func newChaosLoad(r *run) *chaosLoad {
	var pnids []string
	for _, t := range r.tenants {
		pnids = append(pnids, t.phoneNumberID)
	}
	l := &chaosLoad{r: r, api: newChaosClient(r.apiURL), ledger: newChaosLedger(pnids)}
	l.api.observe = r.answers.add
	for i := range r.cfg.Conversations {
		t := i % len(r.tenants)
		j := i / len(r.tenants)
		// A fifth of the handler tenant's conversations are end users
		// writing in through Meta's webhooks.
		l.convs = append(l.convs, &chaosConv{tenant: t, index: j, id: chaosConversationID(t, j), webhook: r.tenants[t].inbound && j%5 == 4})
	}
	return l
}

// chaosConversationID names conversation j of tenant t: a phone number mostly,
// and a few ids that probe the edges, shared by every tenant (the same id in
// two tenants is two conversations).
func chaosConversationID(t, j int) string {
	switch j {
	case 1:
		return "O'Brien'); DROP TABLE ordo.conversations; --"
	case 2:
		return strings.Repeat("9", 256) // the longest id there is
	case 3:
		return "usuário ñ ☃ 会话"
	}
	return fmt.Sprintf("1%02d555%06d", t, j)
}

// newMessage makes conversation c's next message.
func (l *chaosLoad) newMessage(c *chaosConv, rng *rand.Rand) *chaosMsg {
	c.next++
	n := c.next
	tag := fmt.Sprintf("t%d-c%d-%d", c.tenant, c.index, n)
	m := &chaosMsg{tenant: c.tenant, conv: c.id, id: tag, text: "msg " + tag}
	switch {
	case n%29 == 0:
		m.id = "x'); DELETE FROM ordo.messages; -- " + tag
	case n%31 == 0:
		m.id = tag + "-" + strings.Repeat("é", 255-utf8.RuneCountInString(tag)) // 256 characters, 2 bytes each
	}
	switch {
	case n%7 == 0:
		m.text += ` O'Reilly "quoted" \ '); DROP TABLE ordo.steps; --`
	case n%11 == 0:
		m.text += " héllo 👋 مرحبا"
	}
	if c.webhook {
		m.id, m.inbound, m.webhook = "wamid.chaos-"+tag, true, true
		m.body = chaosInboundWebhook(l.r.tenants[c.tenant].phoneNumberID, c.id, m.id, m.text)
		return m
	}
	m.inbound = l.r.tenants[c.tenant].inbound && rng.IntN(10) < 3
	if !m.inbound && ((c.index == 0 && n == 3) || rng.IntN(1000) < 3) {
		m.text += " " + chaosUndeliverable
	} else if !m.inbound && rng.IntN(1000) < 8 {
		m.text += " " + chaosFailsLater
	}
	if m.inbound {
		m.body, _ = json.Marshal(map[string]any{"message_id": m.id, "conversation_id": m.conv, "direction": "inbound",
			"payload": map[string]any{"text": m.text, "from": m.conv}})
	} else {
		fields := map[string]any{"message_id": m.id, "conversation_id": m.conv, "type": "text", "text": map[string]string{"body": m.text}}
		if n%2 == 0 {
			fields["direction"], fields["to"] = "outbound", m.conv
		}
		m.body, _ = json.Marshal(fields)
	}
	return m
}

// Stress offers load until loadCtx ends; offers in flight then go on until
// answered or answerCtx ends.
func (l *chaosLoad) Stress(loadCtx, answerCtx context.Context) {
	clients := min(l.r.cfg.Clients, len(l.convs))
	mean := time.Duration(float64(time.Second) * float64(clients) / l.r.cfg.Rate)
	var wg sync.WaitGroup
	for c := range clients {
		var mine []*chaosConv
		for i := c; i < len(l.convs); i += clients {
			mine = append(mine, l.convs[i])
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.client(loadCtx, answerCtx, chaosRand(l.r.cfg.Seed, uint64(100+c)), mine, mean)
		}()
	}
	wg.Wait()
}

func (l *chaosLoad) client(loadCtx, answerCtx context.Context, rng *rand.Rand, convs []*chaosConv, mean time.Duration) {
	var done []*chaosMsg // accepted, for late copies
	for {
		select {
		case <-loadCtx.Done():
			return
		case <-time.After(time.Duration(rng.ExpFloat64() * float64(mean))):
		}
		if len(done) > 0 && rng.IntN(100) < 3 {
			// A late copy of an old message: still a duplicate, with its
			// original answer, whatever came since.
			if !l.deliver(answerCtx, done[rng.IntN(len(done))], 1, false) {
				return
			}
			continue
		}
		m := l.newMessage(convs[rng.IntN(len(convs))], rng)
		l.ledger.offer(m)
		copies := 1 + rng.IntN(3)
		if !l.deliver(answerCtx, m, copies, copies > 1 && rng.IntN(2) == 0) {
			return
		}
		done = append(done, m)
	}
}

// chaosOutstanding counts the accepted messages not settled yet from the
// provider's side: a text not delivered, or a permanent failure not answered.
func chaosOutstanding(l *chaosLedger, sends []chaosSend, rec chaosProviderRecord) int {
	delivered := chaosDelivered(sends)
	n := 0
	for _, m := range l.accepted() {
		if m.permanent() {
			if rec.permanent[m.text] == 0 {
				n++
			}
			continue
		}
		for _, t := range m.want() {
			if !delivered[chaosSendKey(l.pnids[m.tenant], m.conv, t)] {
				n++
				break
			}
		}
	}
	return n
}
