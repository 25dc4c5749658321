package chaos

import (
	"crypto/hmac"
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
)

// chaosUndeliverable marks the texts of the chosen messages the provider fails
// permanently (131026, message undeliverable), every time: they, and only
// they, must end as dead letters.
const chaosUndeliverable = "[undeliverable]"

// chaosFailsLater marks the texts of chosen messages the provider takes (a
// 200 with a wamid) and Meta's side then reports as failed (131026) in the
// status webhook: not delivered after all. They must end as dead letters,
// their conversation going on.
const chaosFailsLater = "[fails-later]"

// Provider fault kinds, as the report names them.
const (
	faultProvider500       = "provider_500"               // 500 without an answer body code: ambiguous
	faultProviderTimeout   = "provider_timeout"           // the request was read, no answer came
	faultProviderDelivered = "provider_timeout_delivered" // …and the message went out anyway
	faultProviderPairRate  = "provider_pair_rate"         // 400, code 131056
	faultProviderPermanent = "provider_permanent"         // 400, code 131026, on the chosen messages
)

// chaosProvider is the fake Cloud API with the run's failures: decided per
// request from the seed, the text and the how-many-th request for that text
// it is, so a run's provider behaves the same for the same load.
type chaosProvider struct {
	*whatsapptest.Server
	seed        uint64
	sendTimeout time.Duration

	mu        sync.Mutex
	tokens    map[string]string // phone_number_id → access token
	attempts  map[string]int    // requests per text
	forced    []string          // provider faults still to inject once, early
	slowTill  time.Time         // until then, successful answers are held back by slowBy
	slowBy    time.Duration
	ledger    *chaosLedger    // the clients' record, to judge when each message starts
	delivered map[string]bool // chaosSendKey of every send delivered so far
	rec       chaosProviderRecord
	// outage: the Cloud API is away (fault_cloudapi_outage.go): every send
	// is answered 503; outageAnswers counts them.
	outage        bool
	outageAnswers int
}

// chaosProviderRecord is what the provider did besides delivering.
type chaosProviderRecord struct {
	// faults counts injected failures per kind.
	faults map[string]int
	// permanent counts the permanent failures answered, per text.
	permanent map[string]int
	// wrongToken counts requests whose access token was not the one of the
	// phone number's tenant: a credential mix-up.
	wrongToken int
	requests   int
	// early lists the messages (their first send, or their handler call)
	// that started before an earlier message of their conversation was
	// settled; started counts the starts judged.
	early   []string
	started int
	// faultDelivered holds the send keys delivered by a request the
	// provider answered with a fault (a timeout after delivering): a resend
	// of those is the provider's doing.
	faultDelivered map[string]bool
}

func newChaosProvider(seed uint64, sendTimeout time.Duration) *chaosProvider {
	p := &chaosProvider{
		Server:      whatsapptest.NewServer(),
		seed:        seed,
		sendTimeout: sendTimeout,
		tokens:      make(map[string]string),
		delivered:   make(map[string]bool),
		attempts:    make(map[string]int),
		// Each kind happens at least once even in a short run.
		forced: []string{faultProvider500, faultProviderDelivered, faultProviderTimeout, faultProviderPairRate},
		rec:    chaosProviderRecord{faults: make(map[string]int), permanent: make(map[string]int), faultDelivered: make(map[string]bool)},
	}
	p.SetResponder(p.respond)
	return p
}

// allow registers a tenant's phone number and token.
func (p *chaosProvider) allow(phoneNumberID, token string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tokens[phoneNumberID] = token
}

func (p *chaosProvider) respond(req whatsapptest.Send, attempt int) whatsapptest.Response {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rec.requests++
	if want, ok := p.tokens[req.PhoneNumberID]; !ok || req.Token != want {
		p.rec.wrongToken++
		return whatsapptest.Response{Status: http.StatusUnauthorized, ErrorCode: 190}
	}
	if d := whatsapptest.Default(req, attempt); d.Status != http.StatusOK {
		return d
	}
	if a, ok := p.outageAnswer(); ok {
		return a // not a start of the message: nothing went out
	}
	key := chaosSendKey(req.PhoneNumberID, req.To, req.Text)
	if p.attempts[key] == 0 && p.rec.permanent[req.Text] == 0 {
		p.judgeStart(key, 0, "")
	}
	if strings.Contains(req.Text, chaosUndeliverable) {
		p.rec.permanent[req.Text]++
		p.rec.faults[faultProviderPermanent]++
		return whatsapptest.Response{Status: http.StatusBadRequest, ErrorCode: 131026}
	}
	p.attempts[key]++
	n := p.attempts[key]
	var kind string
	if n == 1 && len(p.forced) > 0 && p.rec.requests > 20 {
		kind, p.forced = p.forced[0], p.forced[1:]
	} else {
		switch x := chaosHash(p.seed, req.Text, n) % 1000; {
		case x < 50:
			kind = faultProvider500
		case x < 60:
			kind = faultProviderDelivered
		case x < 70:
			kind = faultProviderTimeout
		case x < 80:
			kind = faultProviderPairRate
		}
	}
	if kind == "" || kind == faultProviderDelivered {
		p.delivered[key] = true
	}
	if kind == "" {
		if time.Now().Before(p.slowTill) {
			return whatsapptest.Response{Status: http.StatusOK, Delay: p.slowBy}
		}
		return whatsapptest.Response{Status: http.StatusOK}
	}
	p.rec.faults[kind]++
	// A timeout is either an answer held back past the sender's timeout or
	// a connection closed after reading; alternate between the two.
	drop := chaosHash(p.seed, req.Text, -n)%2 == 0
	hold := p.sendTimeout + 2*time.Second
	switch kind {
	case faultProvider500:
		return whatsapptest.Response{Status: http.StatusInternalServerError}
	case faultProviderPairRate:
		return whatsapptest.Response{Status: http.StatusBadRequest, ErrorCode: 131056}
	case faultProviderDelivered:
		p.rec.faults[faultProviderTimeout]++ // a timeout too
		p.rec.faultDelivered[key] = true
		if drop {
			return whatsapptest.Response{DropAfterRead: true, Record: true}
		}
		return whatsapptest.Response{Status: http.StatusOK, Delay: hold}
	default: // faultProviderTimeout, not delivered
		if drop {
			return whatsapptest.Response{DropAfterRead: true}
		}
		return whatsapptest.Response{Status: http.StatusServiceUnavailable, Delay: hold}
	}
}

// watch makes the provider judge, at the first request for each text, that
// the message started after the ones before it were settled.
func (p *chaosProvider) watch(l *chaosLedger) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ledger = l
}

// judgeStart records a message that started early; p.mu is held. A send is
// named by its key; a handler call by tenant and message id.
func (p *chaosProvider) judgeStart(key string, tenant int, id string) {
	if p.ledger == nil {
		return
	}
	p.rec.started++
	settled := func(k, text string) bool { return p.delivered[k] || p.rec.permanent[text] > 0 }
	if v := p.ledger.startedEarly(key, tenant, id, settled); v != "" {
		p.rec.early = append(p.rec.early, v)
	}
}

// judgeHandlerCall is judgeStart for the first handler call of a message.
func (p *chaosProvider) judgeHandlerCall(tenant int, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.judgeStart("", tenant, id)
}

// slowDown holds back successful answers by d until t (delivered at once,
// answered late), so that a worker can be stalled in the middle of a send.
func (p *chaosProvider) slowDown(t time.Time, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.slowTill, p.slowBy = t, d
}

// heldUntil is when the last answer held back by slowDown goes out.
func (p *chaosProvider) heldUntil() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.slowTill.Add(p.slowBy)
}

// record returns a copy of what the provider did besides delivering.
func (p *chaosProvider) record() chaosProviderRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.rec
	out.faults = make(map[string]int, len(p.rec.faults))
	for k, v := range p.rec.faults {
		out.faults[k] = v
	}
	out.early = append([]string(nil), p.rec.early...)
	out.faultDelivered = make(map[string]bool, len(p.rec.faultDelivered))
	for k := range p.rec.faultDelivered {
		out.faultDelivered[k] = true
	}
	out.permanent = make(map[string]int, len(p.rec.permanent))
	for k, v := range p.rec.permanent {
		out.permanent[k] = v
	}
	return out
}

// chaosHash is a deterministic choice from the seed, a text and a number.
func chaosHash(seed uint64, s string, n int) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	h.Write([]byte(s))
	binary.LittleEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
	return h.Sum64()
}

// chaosHandler is the tenants' handler (an n8n workflow, in real life): it checks
// ordo's signature and answers an inbound message with two replies, which
// ordo must send in order before the conversation's next message. It fails
// 3% of calls with a 503, which ordo retries.
type chaosHandler struct {
	srv  *handlerServer // its port closes and answers 404 in a handler outage
	seed uint64

	// firstCall, if set, is told of the first call for each message.
	firstCall func(slug, messageID string)

	mu       sync.Mutex
	secrets  map[string]string // tenant slug → handler secret
	attempts map[string]int    // calls per tenant:message_id
	rec      chaosHandlerRecord
}

// chaosHandlerRecord is what the handler saw.
type chaosHandlerRecord struct {
	calls        int
	failures     int // 503s answered on purpose
	badSignature int // calls whose X-Ordo-Signature did not verify
	badKey       int // calls whose Idempotency-Key was not <tenant>:<message_id>
}

// chaosReplies are the texts of the replies to an inbound message with text t.
func chaosReplies(t string) []string { return []string{t + " #1", t + " #2"} }

func newChaosHandler(seed uint64) *chaosHandler {
	h := &chaosHandler{seed: seed, secrets: make(map[string]string), attempts: make(map[string]int)}
	h.srv = newHandlerServer(h)
	return h
}

// URL is the handler's base URL; a tenant's handler is URL/{slug}.
func (h *chaosHandler) URL() string { return h.srv.URL() }

// Close stops the handler.
func (h *chaosHandler) Close() { h.srv.Close() }

func (h *chaosHandler) allow(slug, secret string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.secrets[slug] = secret
}

func (h *chaosHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	slug := strings.TrimPrefix(r.URL.Path, "/")
	h.mu.Lock()
	h.rec.calls++
	secret, ok := h.secrets[slug]
	if !ok || !hmac.Equal([]byte(r.Header.Get("X-Ordo-Signature")), []byte(jobs.Sign([]byte(secret), body))) {
		h.rec.badSignature++
		h.mu.Unlock()
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	// The text is payload.text for a message sent through the REST API,
	// payload.message.text.body for one that came as Meta's webhook.
	var call struct {
		MessageID string `json:"message_id"`
		Payload   struct {
			Text    json.RawMessage `json:"text"`
			Message struct {
				Text struct {
					Body string `json:"body"`
				} `json:"text"`
			} `json:"message"`
		} `json:"payload"`
	}
	_ = json.Unmarshal(body, &call)
	text := call.Payload.Message.Text.Body
	if len(call.Payload.Text) > 0 {
		_ = json.Unmarshal(call.Payload.Text, &text)
	}
	key := slug + ":" + call.MessageID
	if r.Header.Get("Idempotency-Key") != key {
		h.rec.badKey++
	}
	h.attempts[key]++
	fail := chaosHash(h.seed, key, h.attempts[key])%100 < 3
	if fail {
		h.rec.failures++
	}
	first := h.attempts[key] == 1
	h.mu.Unlock()
	if first && h.firstCall != nil {
		h.firstCall(slug, call.MessageID)
	}
	if fail {
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	replies := []map[string]any{} // {"replies": []} is the only "no replies"; null is an error
	for _, t := range chaosReplies(text) {
		replies = append(replies, map[string]any{"type": "text", "text": map[string]string{"body": t}})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"replies": replies})
}

func (h *chaosHandler) record() chaosHandlerRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rec
}
