package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/tenants"
)

// handlerRequest is what a tenant's handler receives.
type handlerRequest struct {
	Tenant         string          `json:"tenant"`
	ConversationID string          `json:"conversation_id"`
	MessageID      string          `json:"message_id"`
	Seq            int64           `json:"seq"`
	Payload        json.RawMessage `json:"payload"`
}

// MaxReplies bounds how many replies one handler answer may ask for.
const MaxReplies = 50

const maxHandlerAnswer = 1 << 20

// Sign returns the X-Ordo-Signature value for body under secret: the same
// "sha256=<hex HMAC-SHA256>" form as Meta's (whatsapp.Sign).
func Sign(secret, body []byte) string { return whatsapp.Sign(string(secret), body) }

// handlerAnswer is what a handler call came to.
type handlerAnswer struct {
	// replies are the replies to send, a JSON array ("[]": none).
	replies json.RawMessage
	// wait: the replies will be posted to /v1/messages/{id}/replies (the
	// tenant's handler_mode is async, or the handler answered 202).
	wait bool
}

// callHandler POSTs m to the tenant's handler and reads its answer by the
// tenant's handler_mode: sync, the replies are in the answer (a 202 makes
// this message async); async, any 2xx means the replies will be posted;
// notify, any 2xx is done. A tenant without a handler keeps its inbound
// messages and answers nothing. A handler not there (connection errors,
// 404, 410; 502-504 on evidence) makes its tenant unreachable; 500, 408 and 429 are
// retried; a timeout is not (timedOut); other 4xx and malformed answers
// are permanent.
func (r *run) callHandler(ctx context.Context, m message) (handlerAnswer, error) {
	none := handlerAnswer{replies: json.RawMessage("[]")}
	if r.tenant.HandlerURL == "" {
		return none, nil
	}
	if err := r.loadHandlerSecrets(ctx); err != nil {
		return handlerAnswer{}, err
	}
	body, err := encodeHandlerRequest(handlerRequest{
		Tenant: r.tenant.Slug, ConversationID: r.conversationID, MessageID: m.id, Seq: m.seq, Payload: m.payload,
	})
	if err != nil {
		return handlerAnswer{}, &failure{msg: "encode handler request: " + err.Error(), action: actDeadLetter}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.tenant.HandlerURL, bytes.NewReader(body))
	if err != nil {
		return handlerAnswer{}, &failure{msg: "handler_url: " + err.Error(), action: actDeadLetter}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ordo")
	if r.auth != nil {
		r.auth.Apply(req)
	}
	req.Header.Set("X-Ordo-Signature", Sign(r.secret, body))
	req.Header.Set("Idempotency-Key", r.tenant.Slug+":"+m.id)
	defer r.startReadReceipt(ctx, m)() // issue 26: jobs/markread.go; ends before the answer is recorded
	resp, err := r.d.handlers.Do(req)
	if err != nil {
		if errors.Is(err, tenants.ErrOutboundRefused) {
			return handlerAnswer{}, &failure{msg: "handler_url refused by the outbound address policy: " + outboundCause(err), action: actDeadLetter}
		}
		if cause := redactURL(err); cause != "timeout" {
			return handlerAnswer{}, &failure{msg: "handler unreachable: " + cause + handlerDown, action: actUnreachable}
		}
		return handlerAnswer{}, r.timedOut()
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxHandlerAnswer+1))
	if err != nil {
		return handlerAnswer{}, &failure{msg: "read handler answer: " + err.Error()}
	}
	switch code := resp.StatusCode; {
	case code == http.StatusNotFound, code == http.StatusGone:
		// n8n answers 404 "webhook … is not registered" while it restarts
		// and while the workflow is switched off for an edit: retried, not
		// a reason to halt every conversation that gets a message meanwhile.
		return handlerAnswer{}, &failure{msg: "handler answered " + strconv.Itoa(code) + handlerDown + " (and its Webhook node's path the handler URL's?)", action: actUnreachable}
	case code == http.StatusBadGateway, code == http.StatusServiceUnavailable, code == http.StatusGatewayTimeout:
		// The proxy in front of the handler may have nothing behind it, or
		// one of several workflows' workers was restarting: evidence, not
		// proof (evidence.go).
		return handlerAnswer{}, &failure{msg: "handler answered " + strconv.Itoa(code) + handlerDown, action: actUnreachable, suspect: true}
	case code >= 500:
		return handlerAnswer{}, &failure{msg: "handler answered " + strconv.Itoa(code) + handlerDown, retryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests:
		return handlerAnswer{}, &failure{msg: "handler answered " + strconv.Itoa(code), retryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	case code >= 300 && code < 400:
		return handlerAnswer{}, &failure{msg: "handler answered " + strconv.Itoa(code) + ": redirects are not followed (a signed call must reach the URL it was signed for); set handler_url to the final URL", action: actDeadLetter}
	case code == http.StatusUnauthorized, code == http.StatusForbidden:
		return handlerAnswer{}, &failure{msg: "handler answered " + strconv.Itoa(code) + ": it refused ordo's call; if its Webhook node checks Header Auth or Basic Auth, store the same with `ordo credential set --name " + tenants.HandlerAuthCredential + "`", action: actDeadLetter}
	case code < 200 || code > 299:
		return handlerAnswer{}, &failure{msg: "handler answered " + strconv.Itoa(code), action: actDeadLetter}
	}
	switch {
	case r.tenant.HandlerMode == "notify":
		return none, nil // the workflow sends through /v1/messages itself
	case r.tenant.HandlerMode == "async", resp.StatusCode == http.StatusAccepted:
		return handlerAnswer{wait: true}, nil
	}
	if len(answer) > maxHandlerAnswer {
		return handlerAnswer{}, &failure{msg: "handler answer larger than 1 MiB", action: actDeadLetter}
	}
	replies, err := parseReplies(answer)
	return handlerAnswer{replies: replies}, err
}

// timedOut is the failure of a handler call that got no answer within the
// tenant's handler timeout. The workflow behind it may still be running (n8n
// finishes an execution whose caller has gone), so by default the call is
// not made again: a retry would run the workflow — and its AI step — once
// more, and both runs' replies could be sent. The message is dead-lettered
// with a reason saying what to change. A tenant with retry_timeouts set has
// the call retried within max_attempts, as before issue 27.
func (r *run) timedOut() error {
	msg := fmt.Sprintf("the handler took longer than %s; n8n may still be running it — raise --handler-timeout or use async mode", seconds(r.handlerTimeout()))
	if r.tenant.RetryTimeouts {
		return &failure{silent: true, msg: msg + " (called again: --retry-timeouts is set)"}
	}
	return &failure{silent: true, msg: msg + "; not called again (`ordo tenant update --retry-timeouts` retries a workflow that is safe to run twice)", action: actDeadLetter}
}

// seconds writes d as "N s" the way the dead letter reads it.
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
}

// handlerDown ends the reason of a failure that means the handler is not
// there right now (the retries' last one is the dead letter's reason).
const handlerDown = ": is the n8n workflow active?"

// loadHandlerSecrets reads, once per run, the tenant's handler secret (the
// signature's key) and its handler auth (none when not set). One that
// cannot be read makes every call of the tenant fail alike until an
// operator acts: the tenant is paused rather than burn attempts for ever.
func (r *run) loadHandlerSecrets(ctx context.Context) error {
	if r.secret != nil {
		return nil
	}
	secret, err := r.d.tenants.HandlerSecretOn(ctx, r.conn(), r.tenant.ID)
	if errors.Is(err, tenants.ErrNotFound) || errors.Is(err, tenants.ErrUnreadable) {
		return &failure{msg: "handler secret cannot be read (set it again with `ordo tenant update`, or check ORDO_MASTER_KEYS)", action: actPause}
	}
	if err != nil {
		return fmt.Errorf("load handler secret: %w", err)
	}
	auth, err := r.d.tenants.HandlerAuthOn(ctx, r.conn(), r.tenant.ID)
	if errors.Is(err, tenants.ErrUnreadable) {
		return &failure{msg: "handler auth cannot be read (set it again with `ordo credential set --name " + tenants.HandlerAuthCredential + "`, or check ORDO_MASTER_KEYS)", action: actPause}
	}
	if err != nil {
		return fmt.Errorf("load handler auth: %w", err)
	}
	r.secret, r.auth = secret, auth
	return nil
}

// handlerTimeout bounds one call of the tenant's handler: its
// handler_timeout_ms, within the process's Config.HandlerTimeout.
func (r *run) handlerTimeout() time.Duration {
	t := time.Duration(r.tenant.HandlerTimeoutMS) * time.Millisecond
	if t <= 0 || t > r.d.cfg.HandlerTimeout {
		return r.d.cfg.HandlerTimeout
	}
	return t
}

// encodeHandlerRequest is the body of a handler call: JSON without HTML
// escaping (Go's default writes <, > and & as \u003c…, which an n8n Crypto
// node checking the signature over JSON.stringify($json.body) would not
// reproduce), and the signature is over exactly these bytes.
func encodeHandlerRequest(req handlerRequest) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(req); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// n8nRespondImmediately is what an n8n Webhook node left on its default
// "Respond: Immediately" answers, before the workflow has built any reply.
const n8nRespondImmediately = "Workflow was started"

// parseReplies reads a handler's answer: {"replies": [{…}, …]}, or n8n's
// items (itemReplies). {"replies": []} is the only way to say "no
// replies": an empty body (an n8n node failed before its Respond to
// Webhook node) or any other shape is a permanent error whose reason names
// the n8n setting to change — never a silent success with the replies lost.
func parseReplies(answer []byte) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(answer)
	if len(trimmed) == 0 {
		return nil, &failure{msg: `handler answered an empty body; want {"replies": [...]} ({"replies": []} for none). ` +
			`In n8n: a node failed before "Respond to Webhook" (see the workflow's executions), or the Webhook node's Respond setting answers before the replies exist`, action: actDeadLetter}
	}
	var replies []json.RawMessage
	if trimmed[0] == '[' {
		var err error
		if replies, err = itemReplies(trimmed); err != nil {
			return nil, err
		}
	} else {
		var raw struct {
			Replies *[]json.RawMessage `json:"replies"`
			Message any                `json:"message"`
		}
		if err := json.Unmarshal(trimmed, &raw); err != nil || raw.Replies == nil {
			if raw.Message == n8nRespondImmediately {
				return nil, &failure{msg: `handler answered "Workflow was started": the n8n Webhook node responds Immediately, before the workflow built its replies. ` +
					`Set its Respond option to "Using 'Respond to Webhook' Node" (or "When Last Node Finishes")`, action: actDeadLetter}
			}
			return nil, &failure{msg: `handler answer is not {"replies": [...]} (a JSON object with a "replies" array; {"replies": []} for none)`, action: actDeadLetter}
		}
		replies = *raw.Replies
	}
	return checkReplies(replies)
}

// n8nItemsHint names the n8n settings that make an answer of items ordo
// reads, for a dead letter about one it cannot.
const n8nItemsHint = `In n8n, make each item {"replies": [...]} or one WhatsApp message with its "type" ` +
	`(a Set or Code node before "Respond to Webhook"), or set "Respond to Webhook" to "Respond With: JSON" with {"replies": [...]}`

// itemReplies reads an answer that is a JSON array: n8n's items, as
// "Respond to Webhook" with "Respond With: All Incoming Items" or a Webhook
// node with "When Last Node Finishes" and "All Entries" give them. Each
// item is {"replies": [...]} (its replies follow the previous item's) or a
// WhatsApp message object with its "type" (sent as one reply), in item
// order. An item of any other shape, or no item at all, is a dead letter
// naming the n8n setting to change.
func itemReplies(answer []byte) ([]json.RawMessage, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(answer, &items); err != nil || len(items) == 0 {
		return nil, &failure{msg: `handler answered an array that holds no n8n items; want {"replies": [...]} ({"replies": []} for none). ` + n8nItemsHint, action: actDeadLetter}
	}
	var replies []json.RawMessage
	for i, item := range items {
		var fields map[string]json.RawMessage
		if t := bytes.TrimSpace(item); len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &fields) != nil {
			return nil, &failure{msg: fmt.Sprintf(`handler answered n8n items; item %d of %d is not a JSON object. `, i+1, len(items)) + n8nItemsHint, action: actDeadLetter}
		}
		if r, ok := fields["replies"]; ok {
			var more []json.RawMessage
			if err := json.Unmarshal(r, &more); err != nil || more == nil {
				return nil, &failure{msg: fmt.Sprintf(`handler answered n8n items; item %d of %d has "replies" that is not an array. `, i+1, len(items)) + n8nItemsHint, action: actDeadLetter}
			}
			replies = append(replies, more...)
		} else if typ, ok := fields["type"]; ok && len(typ) > 0 && typ[0] == '"' {
			replies = append(replies, item)
		} else {
			return nil, &failure{msg: fmt.Sprintf(`handler answered n8n items; item %d of %d is neither {"replies": [...]} nor a WhatsApp message with a "type". `, i+1, len(items)) + n8nItemsHint, action: actDeadLetter}
		}
	}
	if replies == nil {
		replies = []json.RawMessage{}
	}
	return replies, nil
}

// checkReplies checks a handler's replies as WhatsApp will and returns them
// as one JSON array.
func checkReplies(replies []json.RawMessage) (json.RawMessage, error) {
	if len(replies) > MaxReplies {
		return nil, &failure{msg: fmt.Sprintf("handler answered %d replies; at most %d", len(replies), MaxReplies), action: actDeadLetter}
	}
	for i, reply := range replies {
		if t := bytes.TrimSpace(reply); len(t) == 0 || t[0] != '{' {
			return nil, &failure{msg: fmt.Sprintf("handler reply %d is not a JSON object", i), action: actDeadLetter}
		}
		// Refused now, the reply names its path; refused by WhatsApp at send
		// time, it would only say "Invalid parameter". Text Postgres cannot
		// store would fail the step's write instead.
		if err := whatsapp.CheckText(reply); err != nil {
			return nil, &failure{msg: fmt.Sprintf("reply %d of %d: %v", i+1, len(replies), err), action: actDeadLetter}
		}
		if err := whatsapp.ValidateMessage(reply); err != nil {
			return nil, &failure{msg: fmt.Sprintf("reply %d of %d: %v", i+1, len(replies), err), action: actDeadLetter}
		}
	}
	// As sent, not HTML-escaped: "&" stays "&" (json.Marshal would store
	// "\u0026", the same value in other bytes).
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(replies)
	return bytes.TrimRight(out.Bytes(), "\n"), nil
}

// retryAfter parses a Retry-After header (seconds or an HTTP date).
func retryAfter(h string) time.Duration {
	if h == "" {
		return 0
	}
	if n, err := strconv.Atoi(h); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// redactURL keeps a transport error's cause but not the URL, which may carry
// a secret path or query.
func redactURL(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return "timeout"
		}
		return ue.Err.Error()
	}
	return err.Error()
}
