package whatsapp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// DefaultBaseURL is the Graph API root used when Client.BaseURL is empty.
const DefaultBaseURL = "https://graph.facebook.com/v23.0"

// DefaultTimeout bounds one send when Client.HTTP is nil.
const DefaultTimeout = 30 * time.Second

// maxResponseBytes bounds how much of Meta's answer is read: a send answer
// is a few hundred bytes, anything larger is not an answer we understand.
const maxResponseBytes = 1 << 20

// Client sends messages through the WhatsApp Cloud API. The zero value is
// usable; it is safe for concurrent use. Credentials are passed per call
// because every tenant has its own.
type Client struct {
	// BaseURL is the Graph API root including the version, with or without
	// a trailing slash. Default DefaultBaseURL; tests and the sandbox point
	// it at whatsapptest.Server.
	BaseURL string
	// HTTP sends the requests. Default: a client with DefaultTimeout. Its
	// Timeout (or the ctx deadline) bounds one send.
	HTTP *http.Client
}

// Result is what Meta answered to a successful send.
type Result struct {
	// MessageID is the wamid Meta assigned; status webhooks refer to it.
	MessageID string
}

// Send sends one message with the tenant's credential.
//
// message holds the WhatsApp message object's fields ("to", "type", "text",
// "template", ...) as a JSON object. Send adds "messaging_product":"whatsapp"
// and, when callbackData is not empty, "biz_opaque_callback_data" (Meta
// echoes it in the status webhooks), overriding same-named fields of message.
//
// Every failure is a *SendError whose Class says what to do next; a caller's
// context cancellation is wrapped too (errors.Is(err, context.Canceled)
// holds), as Ambiguous if the request had been written and Retry otherwise.
func (c *Client) Send(ctx context.Context, cred Credential, message json.RawMessage, callbackData string) (Result, error) {
	if err := cred.Validate(); err != nil {
		// A broken credential fails every send of the tenant alike.
		return Result{}, &SendError{Class: Paused, Code: NoCode, Err: err}
	}
	body, err := buildBody(message, callbackData)
	if err != nil {
		return Result{}, &SendError{Class: Permanent, Code: NoCode, Err: err}
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint(cred.PhoneNumberID), bytes.NewReader(body))
	if err != nil {
		return Result{}, &SendError{Class: Permanent, Code: NoCode, Err: fmt.Errorf("build request: %w", err)}
	}
	req.Header.Set("Authorization", "Bearer "+cred.AccessToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")

	// wrote turns true once the whole request is on the wire: from then on a
	// missing answer means Meta may have acted on it.
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				wrote.Store(true)
			}
		},
	}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))

	resp, err := c.httpClient().Do(req)
	if err != nil {
		return Result{}, transportError(ctx, err, wrote.Load(), cred.AccessToken)
	}
	defer resp.Body.Close()

	raw, readErr := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if readErr != nil {
		// Meta answered but the answer was lost: for a 2xx the message went
		// out, for an error we cannot tell which one. Either way: ambiguous.
		se := &SendError{Class: Ambiguous, HTTPStatus: resp.StatusCode, Code: NoCode,
			Err: fmt.Errorf("read response: %w", scrubErr(readErr, cred.AccessToken))}
		if ctx.Err() != nil {
			se.Err = fmt.Errorf("read response: %w", ctx.Err())
		}
		return Result{}, se
	}

	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		var ok successBody
		if err := json.Unmarshal(raw, &ok); err != nil || len(ok.Messages) == 0 || ok.Messages[0].ID == "" {
			return Result{}, &SendError{Class: Ambiguous, HTTPStatus: resp.StatusCode, Code: NoCode,
				Message: "success answer without a message id"}
		}
		return Result{MessageID: ok.Messages[0].ID}, nil
	}
	return Result{}, apiError(resp, raw, cred.AccessToken, time.Now())
}

// endpoint is {BaseURL}/{phone_number_id}/messages.
func (c *Client) endpoint(phoneNumberID string) string {
	base := c.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	return strings.TrimRight(base, "/") + "/" + url.PathEscape(phoneNumberID) + "/messages"
}

// NewHTTPClient returns an HTTP client for Client.HTTP: timeout bounds one
// send, and up to conns connections to a host stay open between sends.
// Every send of every tenant goes to one host (graph.facebook.com), and
// net/http keeps only two idle connections per host by default: a pool of
// workers sending at once opened — for Meta, TLS-handshook — a new
// connection for most sends, a visible share of ordo's CPU in `make bench`.
func NewHTTPClient(timeout time.Duration, conns int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = conns
	t.MaxIdleConns = max(t.MaxIdleConns, conns)
	return &http.Client{Timeout: timeout, Transport: t}
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Timeout: DefaultTimeout}
}

// buildBody merges the message fields with the fields Send owns.
func buildBody(message json.RawMessage, callbackData string) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(message, &fields); err != nil {
		return nil, fmt.Errorf("message: must be a JSON object: %w", err)
	}
	if fields == nil { // the JSON literal null
		return nil, errors.New("message: must be a JSON object, got null")
	}
	fields["messaging_product"] = json.RawMessage(`"whatsapp"`)
	if callbackData != "" {
		cb, err := json.Marshal(callbackData)
		if err != nil {
			return nil, fmt.Errorf("encode biz_opaque_callback_data: %w", err)
		}
		fields["biz_opaque_callback_data"] = cb
	}
	body, err := json.Marshal(fields)
	if err != nil {
		return nil, fmt.Errorf("encode message: %w", err)
	}
	return body, nil
}

// successBody is the part of a 2xx answer Send reads.
type successBody struct {
	Messages []struct {
		ID string `json:"id"`
	} `json:"messages"`
}

// errorBody is a Graph API error answer.
type errorBody struct {
	Error *struct {
		Message      string   `json:"message"`
		Type         string   `json:"type"`
		Code         *flexInt `json:"code"`
		ErrorSubcode *flexInt `json:"error_subcode"`
		ErrorData    *struct {
			Details string `json:"details"`
		} `json:"error_data"`
		FBTraceID string `json:"fbtrace_id"`
	} `json:"error"`
}

// flexInt accepts 131026 and "131026": some proxies in front of Meta quote
// the codes.
type flexInt int

// UnmarshalJSON implements json.Unmarshaler.
func (f *flexInt) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("error code %s: %w", b, err)
	}
	*f = flexInt(n)
	return nil
}

// apiError turns a non-2xx answer into a SendError.
func apiError(resp *http.Response, raw []byte, token string, now time.Time) *SendError {
	se := &SendError{
		HTTPStatus: resp.StatusCode,
		Code:       NoCode,
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), now),
	}
	var eb errorBody
	if err := json.Unmarshal(raw, &eb); err == nil && eb.Error != nil {
		if eb.Error.Code != nil {
			se.Code = int(*eb.Error.Code)
		}
		if eb.Error.ErrorSubcode != nil {
			se.Subcode = int(*eb.Error.ErrorSubcode)
		}
		se.Message = eb.Error.Message
		if eb.Error.ErrorData != nil && eb.Error.ErrorData.Details != "" && eb.Error.ErrorData.Details != se.Message {
			se.Message = strings.TrimSpace(se.Message + " (" + eb.Error.ErrorData.Details + ")")
		}
		se.FBTraceID = eb.Error.FBTraceID
	} else {
		se.Message = http.StatusText(resp.StatusCode)
	}
	se.Message = scrub(truncate(se.Message, 1024), token)
	se.Class = Classify(resp.StatusCode, se.Code)
	return se
}

// transportError classifies a failure before any answer arrived.
func transportError(ctx context.Context, err error, wrote bool, token string) *SendError {
	class := Retry
	if wrote {
		class = Ambiguous
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		// The caller gave up: report its reason, not the transport's.
		return &SendError{Class: class, Code: NoCode, Err: fmt.Errorf("post message: %w", ctxErr)}
	}
	return &SendError{Class: class, Code: NoCode, Err: fmt.Errorf("post message: %w", scrubErr(err, token))}
}

// scrub removes the token from text Meta or the transport produced, should
// either ever echo it.
func scrub(s, token string) string {
	if token == "" {
		return s
	}
	return strings.ReplaceAll(s, token, redacted)
}

// scrubErr keeps err (and what it wraps) unless its text contains the token.
func scrubErr(err error, token string) error {
	if token == "" || !strings.Contains(err.Error(), token) {
		return err
	}
	return errors.New(scrub(err.Error(), token))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
