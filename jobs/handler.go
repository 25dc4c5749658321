package jobs

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
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

// Sign returns the X-Ordo-Signature value for body under secret.
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// callHandler POSTs m to the tenant's handler and returns its replies as a
// JSON array. A tenant without a handler keeps its inbound messages and
// answers nothing. 5xx, 408, 429, timeouts and connection errors are retried;
// other 4xx and malformed answers are permanent.
func (r *run) callHandler(ctx context.Context, m message) (json.RawMessage, error) {
	if r.tenant.HandlerURL == "" {
		return json.RawMessage("[]"), nil
	}
	if r.secret == nil {
		secret, err := r.d.tenants.HandlerSecret(ctx, r.tenant.ID)
		if errors.Is(err, tenants.ErrNotFound) || errors.Is(err, tenants.ErrUnreadable) {
			// Every call of the tenant would fail alike until an operator
			// acts: pause the tenant rather than burn attempts for ever.
			return nil, &failure{msg: "handler secret cannot be read (set it again with `ordo tenant update`, or check ORDO_MASTER_KEYS)", action: actPause}
		}
		if err != nil {
			return nil, fmt.Errorf("load handler secret: %w", err)
		}
		r.secret = secret
	}
	body, err := json.Marshal(handlerRequest{
		Tenant: r.tenant.Slug, ConversationID: r.conversationID, MessageID: m.id, Seq: m.seq, Payload: m.payload,
	})
	if err != nil {
		return nil, &failure{msg: "encode handler request: " + err.Error(), action: actDeadLetter}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.tenant.HandlerURL, bytes.NewReader(body))
	if err != nil {
		return nil, &failure{msg: "handler_url: " + err.Error(), action: actDeadLetter}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ordo")
	req.Header.Set("X-Ordo-Signature", Sign(r.secret, body))
	req.Header.Set("Idempotency-Key", r.tenant.Slug+":"+m.id)
	resp, err := r.d.handlers.Do(req)
	if err != nil {
		return nil, &failure{msg: "handler unreachable: " + redactURL(err)}
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxHandlerAnswer+1))
	if err != nil {
		return nil, &failure{msg: "read handler answer: " + err.Error()}
	}
	switch {
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusTooManyRequests:
		return nil, &failure{msg: "handler answered " + strconv.Itoa(resp.StatusCode), retryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return nil, &failure{msg: "handler answered " + strconv.Itoa(resp.StatusCode), action: actDeadLetter}
	}
	if len(answer) > maxHandlerAnswer {
		return nil, &failure{msg: "handler answer larger than 1 MiB", action: actDeadLetter}
	}
	return parseReplies(answer)
}

// parseReplies validates a handler's answer: {"replies": [{…}, …]}; an empty
// body means no replies.
func parseReplies(answer []byte) (json.RawMessage, error) {
	if len(bytes.TrimSpace(answer)) == 0 {
		return json.RawMessage("[]"), nil
	}
	var a struct {
		Replies []json.RawMessage `json:"replies"`
	}
	if err := json.Unmarshal(answer, &a); err != nil {
		return nil, &failure{msg: "handler answer is not {\"replies\": [...]}: " + err.Error(), action: actDeadLetter}
	}
	if len(a.Replies) > MaxReplies {
		return nil, &failure{msg: fmt.Sprintf("handler answered %d replies; at most %d", len(a.Replies), MaxReplies), action: actDeadLetter}
	}
	for i, reply := range a.Replies {
		if t := bytes.TrimSpace(reply); len(t) == 0 || t[0] != '{' {
			return nil, &failure{msg: fmt.Sprintf("handler reply %d is not a JSON object", i), action: actDeadLetter}
		}
		// Refused now, the reply names its path; refused by WhatsApp at send
		// time, it would only say "Invalid parameter".
		if err := whatsapp.ValidateMessage(reply); err != nil {
			return nil, &failure{msg: fmt.Sprintf("reply %d of %d: %v", i+1, len(a.Replies), err), action: actDeadLetter}
		}
	}
	if a.Replies == nil {
		return json.RawMessage("[]"), nil
	}
	out, _ := json.Marshal(a.Replies)
	return out, nil
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
