package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/tenants"
)

// send delivers a send step through the WhatsApp Cloud API with the tenant's
// credential, tagging it with the step id so status webhooks map back.
func (r *run) send(ctx context.Context, st *step) (string, error) {
	if r.cred == nil {
		raw, err := r.d.vault.Get(ctx, r.tenant.ID, "whatsapp")
		if errors.Is(err, tenants.ErrNotFound) {
			return "", &failure{msg: "tenant has no whatsapp credential", permanent: true}
		}
		if err != nil {
			return "", fmt.Errorf("load whatsapp credential: %w", err)
		}
		var c whatsapp.Credential
		if err := json.Unmarshal(raw, &c); err != nil || c.Validate() != nil {
			return "", &failure{msg: "tenant's whatsapp credential is incomplete", permanent: true}
		}
		r.cred = &c
	}
	msg, err := withRecipient(st.request, r.conversationID)
	if err != nil {
		return "", &failure{msg: err.Error(), permanent: true}
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

// classifySend maps the channel's error classes onto what a step does next.
func classifySend(err error) error {
	var se *whatsapp.SendError
	if !errors.As(err, &se) {
		return &failure{msg: err.Error(), ambiguous: true}
	}
	f := &failure{msg: se.Error(), retryAfter: se.RetryAfter}
	switch se.Class {
	case whatsapp.Permanent:
		f.permanent = true
	case whatsapp.Ambiguous:
		f.ambiguous = true
	}
	return f
}
