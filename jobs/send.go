package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/tenants"
)

// sendActions is the one place a WhatsApp send failure's class becomes what
// the step does next (whatsapp.Classify maps Meta's codes to the classes).
var sendActions = map[whatsapp.Class]action{
	whatsapp.Retry:     actRetry,      // never reached Meta: send again after backoff
	whatsapp.Throttled: actThrottle,   // 130429, 4, 80007: back off and slow the whole number
	whatsapp.PairRate:  actPairRate,   // 131056: this conversation waits 4^X s, the others go on
	whatsapp.Ambiguous: actAmbiguous,  // 5xx, timeout, 131000, 131016: may have gone out
	whatsapp.Permanent: actDeadLetter, // 131026, 131047, 100, 131008/9, 132xxx: dead letter
	whatsapp.Paused:    actPause,      // 190, 0, 10, 2xx, 368, 131031: pause the tenant's sending
}

// classifySend turns a send error into a step failure. An error that is not
// the client's (it always returns *whatsapp.SendError) is treated as
// ambiguous: nothing says the message did not go out.
func classifySend(err error) *failure {
	var se *whatsapp.SendError
	if !errors.As(err, &se) {
		return &failure{msg: err.Error(), action: actAmbiguous, class: whatsapp.Ambiguous.String()}
	}
	a, ok := sendActions[se.Class]
	if !ok {
		a = actAmbiguous
	}
	reach := whatsapp.ReachOf(err)
	return &failure{msg: se.Error(), action: a, class: se.Class.String(), retryAfter: se.RetryAfter,
		reach: reach, answered: reach == whatsapp.Reached && se.HTTPStatus != 0}
}

// prepareSend readies a send step: the tenant's WhatsApp credential (the
// slot in the pacing is taken with the attempt's start). ok false means not
// now, and out says when to look again: a tenant without a usable credential
// has its sending paused (every send would fail the same way until an
// operator fixes it), and started, an attempt already recorded, gets its
// attempt back.
func (r *run) prepareSend(ctx context.Context, started *step) (out outcome, ok bool, err error) {
	if r.cred == nil {
		if c, ok := r.d.creds.get(r.tenant.ID, r.credentialAt); ok {
			r.cred = &c
		}
	}
	if r.cred == nil {
		cred, problem, err := r.loadCredential(ctx)
		if err != nil {
			return outcome{}, false, err
		}
		if problem != "" {
			var entry []byte
			if started != nil {
				entry = errorEntry(started.attempts, problem, "")
			}
			out, err := r.pauseSending(ctx, started, problem, entry)
			return out, false, err
		}
		r.cred = &cred
		r.d.creds.put(r.tenant.ID, r.credentialAt, cred)
	}
	return outcome{}, true, nil
}

// loadCredential reads the tenant's whatsapp credential; problem says why it
// cannot send with it.
func (r *run) loadCredential(ctx context.Context) (cred whatsapp.Credential, problem string, err error) {
	// On the drain's own connection, which it holds anyway: waiting for a
	// pool connection here starved drains under load.
	raw, err := r.d.vault.GetOn(ctx, r.conn(), r.tenant.ID, "whatsapp")
	if errors.Is(err, tenants.ErrNotFound) {
		if sc := r.d.cfg.SandboxCredential; sc != nil {
			return *sc, "", nil // ordo dev: the sandbox stands in
		}
		return cred, "tenant has no whatsapp credential", nil
	}
	if errors.Is(err, tenants.ErrUnreadable) {
		// Sealed with a master key this process lacks, or altered: the
		// same every time until an operator fixes keys or credential.
		return cred, "tenant's whatsapp credential cannot be decrypted (set it again, or check ORDO_MASTER_KEYS)", nil
	}
	if err != nil {
		return cred, "", fmt.Errorf("load whatsapp credential: %w", err)
	}
	if err := json.Unmarshal(raw, &cred); err != nil {
		return cred, "tenant's whatsapp credential is not a JSON object", nil
	}
	if err := cred.Validate(); err != nil {
		return cred, err.Error(), nil
	}
	return cred, "", nil
}

// conn is the connection the run reads on: its session's, which holds its
// conversation (a statement there also renews the lease), or, for a batch's
// read before any session, the batch's (run.on).
func (r *run) conn() tenants.Querier {
	if r.s != nil {
		r.s.touch()
		return r.s.conn
	}
	if r.on != nil {
		return r.on
	}
	return r.d.pool
}

// send delivers a send step through the WhatsApp Cloud API with the tenant's
// credential, tagging it with the step id so status webhooks map back.
func (r *run) send(ctx context.Context, st *step) (string, error) {
	msg, err := withRecipient(st.request, r.conversationID)
	if err != nil {
		return "", &failure{msg: err.Error(), action: actDeadLetter}
	}
	r.d.unknownTypes.Note(ctx, r.d.logger, msg)
	if err := r.checkWindow(ctx, st); err != nil { // issue 26
		return "", err
	}
	res, err := r.d.wa.Send(ctx, *r.cred, msg, strconv.FormatInt(st.id, 10))
	if err != nil {
		return "", classifySend(err)
	}
	return res.MessageID, nil
}

// A send is checked against WhatsApp's message schema once, where its
// message entered: engine.Ingest (REST), checkReplies (a handler's
// replies), the replies endpoint (an async handler's). An outbound message
// another application put in through SQL (ordo.enqueue_message), which no Go
// saw, comes with its send step stored 'unchecked', and the drain that meets
// one checks it before its first attempt (checkUnchecked) — and, in the same
// go, for a tenant whose sends batch, the other unchecked sends at the head
// of the tenant's conversations (an import's): those that pass lose their
// step and are batched like any checked message (ordo.claim batches only
// messages with no step yet); those that fail are marked 'refused' with the
// reason, and their own drain dead-letters them without checking again.
// Refused, a message's dead letter names the JSON path and no request
// leaves; sent, Meta would answer only "(#100) Invalid parameter". A
// replayed refusal is checked again (ordo.resolve_dead_letter). A pass is
// recorded by the attempt's start (status running): a send whose start is
// put off (a far pacing slot, a paused tenant) is checked again when it
// comes back.

// uncheckedSweep bounds the other unchecked sends one check takes along.
const uncheckedSweep = 128

// uncheckedQuery reads, in a transaction, the unchecked send steps at the
// head of tenant $1's conversations in the ready set other than $2, in due
// order (what the next claims take), at most $3, each of a conversation
// whose drain lock it could take (ordo.drain_key, tried, held to the
// transaction's end): no drain has it, and none takes it until the check is
// recorded, so no send is checked both here and by its own drain. The locks
// are tried only on the rows the limit keeps.
const uncheckedQuery = `
SELECT x.id, x.message_pk, x.request FROM (
    SELECT s.id, s.message_pk, s.request, r.conversation_pk
    FROM ordo.ready r
    JOIN ordo.conversations c ON c.id = r.conversation_pk
    JOIN ordo.messages m ON m.conversation_pk = c.id AND m.seq = c.head_seq + 1
    JOIN ordo.steps s ON s.message_pk = m.id AND s.idx = 0
    WHERE r.tenant_id = $1 AND r.conversation_pk <> $2 AND NOT r.running AND s.status = 'unchecked'
    ORDER BY r.due_at
    LIMIT $3) x
WHERE (SELECT pg_try_advisory_xact_lock(k.ns, k.key) FROM ordo.drain_key(x.conversation_pk) k)`

// passUnchecked drops the steps $1 that passed: their messages are then
// started like any checked one (and batched: ordo.claim).
const passUnchecked = `DELETE FROM ordo.steps WHERE id = ANY ($1) AND status = 'unchecked'`

// refuseUnchecked marks the steps $1 that failed 'refused', with their
// errors $2 (a JSON array per step).
const refuseUnchecked = `
UPDATE ordo.steps s SET status = 'refused', errors = s.errors || u.entry::jsonb
FROM unnest($1::bigint[], $2::text[]) AS u(id, entry)
WHERE s.id = u.id AND s.status = 'unchecked'`

// refusedReasonQuery reads why step $1 was refused.
const refusedReasonQuery = `SELECT coalesce(errors->-1->>'error', 'not sent, WhatsApp would refuse it') FROM ordo.steps WHERE id = $1`

// checkMessage checks the outbound message of message row messagePK: nil,
// or why it is not sent.
func (r *run) checkMessage(messagePK int64, request json.RawMessage) *failure {
	if r.d.hooks.checked != nil {
		r.d.hooks.checked(messagePK)
	}
	if err := whatsapp.ValidateMessage(request); err != nil {
		return &failure{msg: "not sent, WhatsApp would refuse it: " + err.Error(), action: actDeadLetter, class: whatsapp.Permanent.String()}
	}
	return nil
}

// settingsBatch reports whether t's settings let its sends go in batches:
// the tenant's part of ordo.may_batch, which decides (a tenant it passes
// may still be refused there: paused, its number throttled or away).
func settingsBatch(t tenants.Tenant) bool {
	return t.SendRate == 0 && t.PairGapMS == 0 && t.MaxConcurrency == 0 && t.SendingPausedAt == nil
}

// checkUnchecked checks st, m's unchecked send, and — once a run, for a
// tenant whose sends may batch — the other unchecked sends at the head of
// the tenant's conversations. A failure is st's refusal.
func (r *run) checkUnchecked(ctx context.Context, m message, st *step) (*failure, error) {
	f := r.checkMessage(m.pk, st.request)
	if r.swept || !settingsBatch(r.tenant) {
		// The sweep is there for the batches (ordo.claim batches only
		// checked sends). A paced tenant's run would sweep again each time
		// a send told to wait for its slot comes back.
		return f, nil
	}
	r.swept = true
	r.s.touch()
	err := pgx.BeginFunc(ctx, r.s.conn, func(tx pgx.Tx) error {
		type candidate struct {
			ID        int64
			MessagePK int64
			Request   json.RawMessage
		}
		rows, _ := tx.Query(ctx, uncheckedQuery, r.tenant.ID, r.s.conv, uncheckedSweep)
		cands, err := pgx.CollectRows(rows, pgx.RowToStructByPos[candidate])
		if err != nil || len(cands) == 0 {
			return err
		}
		var (
			passed, refused []int64
			entries         []string
		)
		for _, c := range cands {
			if cf := r.checkMessage(c.MessagePK, c.Request); cf != nil {
				refused = append(refused, c.ID)
				entries = append(entries, string(errorEntry(0, cf.msg, cf.class)))
			} else {
				passed = append(passed, c.ID)
			}
		}
		b := &pgx.Batch{}
		b.Queue(passUnchecked, passed)
		b.Queue(refuseUnchecked, refused, entries)
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return nil, r.s.fail(fmt.Errorf("check unchecked sends: %w", err))
	}
	return f, nil
}

// refusedReason reads why another drain's check refused st.
func (r *run) refusedReason(ctx context.Context, st *step) (string, error) {
	var reason string
	if err := r.s.queryRow(ctx, refusedReasonQuery, []any{st.id}, &reason); err != nil {
		return "", fmt.Errorf("read refusal: %w", err)
	}
	return reason, nil
}

// The customer service window for a handler's replies (issue 26). REST and
// SQL messages are checked at ingest (ordo.enqueue_message, SQLSTATE
// ORW01); a reply is checked right before it is sent, against the
// conversation's latest inbound stamp (conversations.last_inbound_at,
// written by the webhook): a reply that is not a template, sent more than
// whatsapp.ServiceWindow after the user last wrote, is dead-lettered with
// the ingest's words instead of being refused by Meta (131047).

// lastInboundQuery reads conversation $1's latest inbound stamp (no lock:
// it only moves forward).
const lastInboundQuery = `SELECT last_inbound_at FROM ordo.conversations WHERE id = $1`

// checkWindow refuses a reply (a send step after a handle step: idx > 0)
// outside the service window. Outbound messages (idx 0) were checked at
// ingest, and the batched drain sends only those.
func (r *run) checkWindow(ctx context.Context, st *step) error {
	if st.idx == 0 || r.s == nil || whatsapp.IsTemplate(st.request) {
		return nil
	}
	var last *time.Time
	if err := r.s.queryRow(ctx, lastInboundQuery, []any{r.s.conv}, &last); err != nil {
		return fmt.Errorf("read service window: %w", err)
	}
	if last == nil {
		return nil // no inbound seen through the webhook: Meta decides
	}
	if end := last.Add(whatsapp.ServiceWindow); time.Now().After(end) {
		return &failure{msg: "not sent, " + whatsapp.OutsideWindow(end), action: actDeadLetter, class: whatsapp.Permanent.String()}
	}
	return nil
}

// withRecipient defaults a message's "to" to the conversation id.
func withRecipient(request json.RawMessage, conversationID string) (json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(request, &fields); err != nil || fields == nil {
		return nil, errors.New("message is not a JSON object")
	}
	if _, ok := fields["to"]; ok {
		return request, nil
	}
	fields["to"], _ = json.Marshal(conversationID)
	return json.Marshal(fields)
}

// credentialCache keeps decrypted WhatsApp credentials by tenant, each
// valid for the credential row's updated_at it was read at: the takeover
// reads that stamp, so a changed credential is read again at once and an
// unchanged one costs no query and no decryption.
type credentialCache struct {
	mu sync.Mutex
	m  map[int64]cachedCredential
}

type cachedCredential struct {
	at   time.Time
	cred whatsapp.Credential
}

func (c *credentialCache) get(tenantID int64, at *time.Time) (whatsapp.Credential, bool) {
	if at == nil {
		return whatsapp.Credential{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[tenantID]
	if !ok || !e.at.Equal(*at) {
		return whatsapp.Credential{}, false
	}
	return e.cred, true
}

// phone is the sending number of the tenant's cached credential, whatever
// its stamp: a hint for the takeover to start a send with (a number changed
// meanwhile costs one send paced on the old number; the send itself uses the
// credential read for the stamp).
func (c *credentialCache) phone(tenantID int64) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[tenantID]
	return e.cred.PhoneNumberID, ok
}

func (c *credentialCache) put(tenantID int64, at *time.Time, cred whatsapp.Credential) {
	if at == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[int64]cachedCredential)
	}
	c.m[tenantID] = cachedCredential{at: *at, cred: cred}
}

// credentialStampQuery reads when the tenant's WhatsApp credential last
// changed (the cache's stamp).
const credentialStampQuery = `SELECT updated_at FROM ordo.credentials WHERE tenant_id = $1 AND name = 'whatsapp'`

// warmCredential reads tenant's WhatsApp credential into the cache before
// its first claim on this process, so that the claim may batch: its
// number, or nil when there is no usable credential (the drain settles that).
func (d *Drainer) warmCredential(ctx context.Context, conn tenants.Querier, tenant int64) *string {
	var at time.Time
	if err := conn.QueryRow(ctx, credentialStampQuery, tenant).Scan(&at); err != nil {
		return nil
	}
	cred, problem, err := (&run{d: d, tenant: tenants.Tenant{ID: tenant}, on: conn}).loadCredential(ctx)
	if err != nil || problem != "" {
		return nil
	}
	d.creds.put(tenant, &at, cred)
	return &cred.PhoneNumberID
}
