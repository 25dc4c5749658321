// Package whatsapptest is a fake WhatsApp Cloud API for ordo's tests, its
// benchmark and its chaos run: it records what was sent, answers like Meta
// (or fails on demand, including the ambiguous failures where the message
// went out but no answer came back), and checks the recorded sends for
// duplicates, order violations and losses.
//
// It is a normal package (not a _test file) and does not import "testing",
// so the ordo binary can start it for `ordo bench` and `ordo chaos`.
package whatsapptest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// maxBody bounds a request body the fake reads.
const maxBody = 1 << 20

// isVersion reports whether a path segment is a Graph API version such as
// "v23.0".
func isVersion(seg string) bool {
	rest, ok := strings.CutPrefix(seg, "v")
	if !ok || rest == "" {
		return false
	}
	major, minor, _ := strings.Cut(rest, ".")
	return isDigits(major) && (minor == "" && !strings.HasSuffix(rest, ".") || isDigits(minor))
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// Send is one message the fake received.
type Send struct {
	// PhoneNumberID is the business number of the URL path.
	PhoneNumberID string
	// To is the body's "to": the end user, i.e. the conversation.
	To string
	// CallbackData is the body's "biz_opaque_callback_data" (ordo's step id).
	CallbackData string
	// WAMID is the message id the fake assigned; empty for a request that
	// was neither answered 2xx nor recorded.
	WAMID string
	// Token is the bearer token of the Authorization header.
	Token string
	// Body is the request body as received.
	Body json.RawMessage
	// At is when the request arrived.
	At time.Time
	// Text is text.body when the message type is "text".
	Text string
}

// Response is what the fake does with one request.
type Response struct {
	// Status is the HTTP status; 0 means 200.
	Status int
	// ErrorCode is the Graph API error.code of a non-2xx answer; 0 writes an
	// error without a code (the client then classifies by Status alone).
	ErrorCode int
	// Subcode is error.error_subcode; 0 leaves it out.
	Subcode int
	// RetryAfter is the Retry-After header value, if any.
	RetryAfter string
	// Delay holds the answer back. A 2xx (or Record) send is recorded before
	// the delay, as Meta would have accepted it: a client that times out
	// meanwhile sees an ambiguous failure of a message that went out.
	Delay time.Duration
	// DropAfterRead closes the connection after reading the request,
	// without answering. The send is lost (not in Sends) unless Record.
	DropAfterRead bool
	// Record counts a failing request as delivered (it appears in Sends with
	// a WAMID): the message went out although the client sees a failure.
	Record bool
}

// Default is the responder a new Server uses, and the one a custom responder
// can fall back to: 401 with code 190 without a bearer token, 400 with code
// 100 for a body that is not a WhatsApp message with a "to", else 200.
func Default(req Send, _ int) Response {
	if req.Token == "" {
		return Response{Status: http.StatusUnauthorized, ErrorCode: 190}
	}
	var body struct {
		MessagingProduct string `json:"messaging_product"`
	}
	if err := json.Unmarshal(req.Body, &body); err != nil || body.MessagingProduct != "whatsapp" || req.To == "" {
		return Response{Status: http.StatusBadRequest, ErrorCode: 100}
	}
	return Response{Status: http.StatusOK}
}

// Server is a fake Cloud API listening on 127.0.0.1. It is safe for
// concurrent use.
type Server struct {
	srv  *httptest.Server
	done chan struct{}

	mu        sync.Mutex
	sends     []Send
	attempts  int
	perCB     map[string]int
	responder func(req Send, attempt int) Response
	nextWAMID int
	// reads are the read receipts received (not sends: see Reads);
	// readStatus, when not 0, is the error status they are answered.
	reads      []Read
	readStatus int
	// changed is closed and replaced whenever a send is recorded.
	changed chan struct{}
	closed  bool
}

// NewServer starts a fake Cloud API on 127.0.0.1 answering with Default.
func NewServer() *Server {
	s := &Server{
		done:      make(chan struct{}),
		perCB:     make(map[string]int),
		responder: Default,
		changed:   make(chan struct{}),
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serveHTTP))
	// Dropped connections are the point of some tests: keep them quiet.
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.srv.Start()
	return s
}

// URL is the base URL to use as ORDO_WHATSAPP_API_URL. The fake serves
// {URL}/{phone_number_id}/messages, with or without a version segment such
// as /v23.0 in front.
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server; delayed answers still pending are abandoned.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	s.mu.Unlock()
	s.srv.Close()
}

// SetResponder replaces the responder; nil restores Default. attempt counts
// the requests received with the same CallbackData, this one included
// (1 for the first).
func (s *Server) SetResponder(f func(req Send, attempt int) Response) {
	if f == nil {
		f = Default
	}
	s.mu.Lock()
	s.responder = f
	s.mu.Unlock()
}

// Reset forgets every request received so far (sends, attempts, per-callback
// counts), as if the server had just started; the responder stays. A
// benchmark uses it to measure after a warm-up.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sends, s.attempts = nil, 0
	s.perCB = make(map[string]int)
}

// Sends returns the delivered sends (answered 2xx, or recorded) in arrival
// order.
func (s *Server) Sends() []Send {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Send(nil), s.sends...)
}

// SendsTo returns the delivered sends to one end user, in arrival order.
func (s *Server) SendsTo(to string) []Send {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Send
	for _, snd := range s.sends {
		if snd.To == to {
			out = append(out, snd)
		}
	}
	return out
}

// Attempts counts every request received on the messages endpoint, failed
// or not.
func (s *Server) Attempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts
}

// WaitForSends blocks until at least n sends were delivered, or ctx ends.
func (s *Server) WaitForSends(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		have, changed := len(s.sends), s.changed
		s.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("wait for %d whatsapp sends (have %d): %w", n, have, ctx.Err())
		}
	}
}

// phoneNumberID extracts {phone_number_id} from /[vX.Y/]{id}/messages.
func phoneNumberID(path string) (string, bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) == 3 && isVersion(parts[0]) {
		parts = parts[1:]
	}
	if len(parts) != 2 || parts[1] != "messages" || parts[0] == "" {
		return "", false
	}
	return parts[0], true
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	id, ok := phoneNumberID(r.URL.Path)
	if !ok || r.Method != http.MethodPost {
		writeError(w, http.StatusNotFound, 100, 0, "Unsupported request: unknown path or method")
		return
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		// The client went away mid-request: nothing was accepted.
		return
	}
	if whatsapp.IsReadReceipt(raw) {
		s.readReceipt(w, id, r.Header.Get("Authorization"), raw)
		return
	}
	req := parseSend(id, r.Header.Get("Authorization"), raw)

	s.mu.Lock()
	s.attempts++
	s.perCB[req.CallbackData]++
	attempt, responder := s.perCB[req.CallbackData], s.responder
	s.mu.Unlock()

	resp := responder(req, attempt)
	status := resp.Status
	if status == 0 {
		status = http.StatusOK
	}
	ok2xx := status >= 200 && status < 300
	if (ok2xx && !resp.DropAfterRead) || resp.Record {
		req = s.record(req)
	}

	if resp.Delay > 0 {
		t := time.NewTimer(resp.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		}
	}
	if resp.DropAfterRead {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler) // closes the connection without answering
	}
	if resp.RetryAfter != "" {
		w.Header().Set("Retry-After", resp.RetryAfter)
	}
	if !ok2xx {
		writeError(w, status, resp.ErrorCode, resp.Subcode, "fake failure")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"messaging_product": "whatsapp",
		"contacts":          []map[string]string{{"input": req.To, "wa_id": req.To}},
		"messages":          []map[string]string{{"id": req.WAMID}},
	})
}

// record assigns a WAMID and appends the send.
func (s *Server) record(req Send) Send {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextWAMID++
	req.WAMID = "wamid." + strconv.Itoa(s.nextWAMID)
	s.sends = append(s.sends, req)
	close(s.changed)
	s.changed = make(chan struct{})
	return req
}

// parseSend reads what the fake needs from a request; a malformed body
// leaves the fields empty for the responder to judge.
func parseSend(phoneNumberID, authorization string, raw []byte) Send {
	req := Send{PhoneNumberID: phoneNumberID, Body: json.RawMessage(raw), At: time.Now()}
	if tok, ok := strings.CutPrefix(authorization, "Bearer "); ok {
		req.Token = strings.TrimSpace(tok)
	}
	var body struct {
		To           string `json:"to"`
		Type         string `json:"type"`
		CallbackData string `json:"biz_opaque_callback_data"`
		Text         struct {
			Body string `json:"body"`
		} `json:"text"`
	}
	if err := json.Unmarshal(raw, &body); err == nil {
		req.To, req.CallbackData = body.To, body.CallbackData
		if body.Type == "text" {
			req.Text = body.Text.Body
		}
	}
	return req
}

// writeError answers in the Graph API error shape.
func writeError(w http.ResponseWriter, status, code, subcode int, message string) {
	e := map[string]any{
		"message":    fmt.Sprintf("(#%d) %s", code, message),
		"type":       "OAuthException",
		"fbtrace_id": "FakeTrace" + strconv.Itoa(status),
	}
	if code != 0 {
		e["code"] = code
	} else {
		e["message"] = message
	}
	if subcode != 0 {
		e["error_subcode"] = subcode
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": e})
}

// Read is a read receipt (with its typing indicator) the fake received:
// POST /{phone_number_id}/messages with {"status":"read","message_id"}.
type Read struct {
	PhoneNumberID string
	// MessageID is the inbound wamid marked read.
	MessageID string
	Token     string
	Body      json.RawMessage
	At        time.Time
}

// Reads returns the read receipts received, in arrival order. They are not
// sends: Sends, Attempts and the responder never see them.
func (s *Server) Reads() []Read {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Read(nil), s.reads...)
}

// readReceipt records a read receipt and answers like Meta ({"success":
// true}); without a bearer token it answers 401 with code 190.
func (s *Server) readReceipt(w http.ResponseWriter, phoneNumberID, authorization string, raw []byte) {
	tok, _ := strings.CutPrefix(authorization, "Bearer ")
	if strings.TrimSpace(tok) == "" {
		writeError(w, http.StatusUnauthorized, 190, 0, "Invalid OAuth access token")
		return
	}
	var body struct {
		MessageID string `json:"message_id"`
	}
	_ = json.Unmarshal(raw, &body)
	s.mu.Lock()
	fail := s.readStatus
	if fail == 0 {
		s.reads = append(s.reads, Read{PhoneNumberID: phoneNumberID, MessageID: body.MessageID, Token: strings.TrimSpace(tok), Body: raw, At: time.Now()})
	}
	s.mu.Unlock()
	if fail != 0 {
		writeError(w, fail, 131000, 0, "fake read receipt failure")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]bool{"success": true})
}

// FailReads answers every read receipt from now on with status (and Meta's
// 131000), recording none; 0 answers them again.
func (s *Server) FailReads(status int) {
	s.mu.Lock()
	s.readStatus = status
	s.mu.Unlock()
}
