// Package whatsapp is ordo's adapter for the WhatsApp Cloud API (Meta's
// Graph API): it sends one message with a tenant's credential, classifies
// every way a send can fail so the engine knows whether to retry, slow down,
// reconcile or stop, and parses and authenticates the webhooks Meta sends
// back (inbound messages and delivery statuses).
//
// The package knows nothing about tenants, conversations or the database: it
// is a pure adapter named after its technology, and it imports nothing from
// the rest of ordo.
package whatsapp

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
)

// redacted replaces a secret wherever a Credential is printed or logged.
const redacted = "[redacted]"

// Credential is a tenant's WhatsApp Cloud API credential, stored encrypted by
// the vault as the JSON object
// {"phone_number_id","access_token","app_secret","verify_token"}.
//
// Printing it with fmt (%v, %+v, %#v, %s, %q) or logging it with slog never
// shows the access token, the app secret or the verify token: only whether
// each one is set.
type Credential struct {
	// PhoneNumberID is the business phone number's Graph API id; sends go to
	// /{phone_number_id}/messages and webhooks name it in value.metadata.
	PhoneNumberID string `json:"phone_number_id"`
	// AccessToken is the system-user (or temporary) token sent as
	// "Authorization: Bearer <access_token>". Secret.
	AccessToken string `json:"access_token"`
	// AppSecret is the Meta app's secret, the HMAC-SHA256 key of the
	// X-Hub-Signature-256 webhook header. Secret.
	AppSecret string `json:"app_secret"`
	// VerifyToken is the string Meta echoes in hub.verify_token when the
	// webhook is (re)subscribed. Secret.
	VerifyToken string `json:"verify_token"`
}

// Validate reports what is missing for the credential to send: the phone
// number id and the access token. AppSecret and VerifyToken are only needed
// to receive webhooks, so they are optional here.
func (c Credential) Validate() error {
	var errs []error
	if strings.TrimSpace(c.PhoneNumberID) == "" {
		errs = append(errs, errors.New("phone_number_id: required"))
	} else if strings.ContainsAny(c.PhoneNumberID, "/?#") {
		// It becomes a path segment of the Graph API URL.
		errs = append(errs, errors.New("phone_number_id: must not contain '/', '?' or '#'"))
	}
	if strings.TrimSpace(c.AccessToken) == "" {
		errs = append(errs, errors.New("access_token: required"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("whatsapp credential: %w", errors.Join(errs...))
	}
	return nil
}

// mask says whether a secret is set without showing it.
func mask(secret string) string {
	if secret == "" {
		return ""
	}
	return redacted
}

// String shows the phone number id and hides the secrets.
func (c Credential) String() string {
	return fmt.Sprintf("{phone_number_id:%s access_token:%s app_secret:%s verify_token:%s}",
		c.PhoneNumberID, mask(c.AccessToken), mask(c.AppSecret), mask(c.VerifyToken))
}

// GoString is String in Go syntax, for %#v.
func (c Credential) GoString() string {
	return fmt.Sprintf("whatsapp.Credential{PhoneNumberID:%s, AccessToken:%s, AppSecret:%s, VerifyToken:%s}",
		strconv.Quote(c.PhoneNumberID), strconv.Quote(mask(c.AccessToken)),
		strconv.Quote(mask(c.AppSecret)), strconv.Quote(mask(c.VerifyToken)))
}

// Format implements fmt.Formatter so that every verb, including %+v and %x
// which would otherwise walk the struct fields, goes through the redacted
// forms.
func (c Credential) Format(f fmt.State, verb rune) {
	switch {
	case verb == 'v' && f.Flag('#'):
		_, _ = fmt.Fprint(f, c.GoString())
	case verb == 'q':
		_, _ = fmt.Fprint(f, strconv.Quote(c.String()))
	default:
		_, _ = fmt.Fprint(f, c.String())
	}
}

// LogValue implements slog.LogValuer: logs carry the phone number id and
// whether each secret is set, never the secrets.
func (c Credential) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("phone_number_id", c.PhoneNumberID),
		slog.String("access_token", mask(c.AccessToken)),
		slog.String("app_secret", mask(c.AppSecret)),
		slog.String("verify_token", mask(c.VerifyToken)),
	)
}
