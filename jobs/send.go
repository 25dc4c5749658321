package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

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
	// REST and handler replies are checked at the door; a message another
	// application put in with ordo.enqueue_message (or stored before the
	// check existed) is checked here, against the same schema: refused now,
	// its dead letter names the JSON path and no request leaves; sent, Meta
	// would answer only "(#100) Invalid parameter".
	if err := whatsapp.ValidateMessage(msg); err != nil {
		return "", &failure{msg: "not sent, WhatsApp would refuse it: " + err.Error(), action: actDeadLetter, class: whatsapp.Permanent.String()}
	}
	r.d.unknownTypes.Note(ctx, r.d.logger, msg)
	if err := r.checkWindow(ctx, st); err != nil { // issue 26: jobs/window.go
		return "", err
	}
	res, err := r.d.wa.Send(ctx, *r.cred, msg, strconv.FormatInt(st.id, 10))
	if err != nil {
		return "", classifySend(err)
	}
	return res.MessageID, nil
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
