package web

// Meta's WhatsApp webhooks: GET /webhooks/whatsapp/{tenant} answers the
// subscription handshake, POST delivers messages and statuses. There is no
// API key: the tenant is the path's slug, and a POST is authenticated by
// X-Hub-Signature-256, the HMAC-SHA256 of the raw body under the app_secret
// of the tenant's whatsapp credential.
//
// The URL is public, so a stranger's request costs little: the tenant is
// looked up first (cached, channels.go) and nothing is read for an unknown
// one; a declared length over Config.MaxWebhookBytes is refused unread; at
// most Config.MaxUnauthenticatedBodies bodies are read at once, each at most
// MaxWebhookBytes, hashed as it is read; only a body whose signature holds
// is parsed. The slots are shared fairly between client addresses and
// tenants, and a body arriving too slowly is cut (bodySlots, below). An unknown tenant, one without a whatsapp credential and a bad
// signature get the same answer, so the endpoint does not tell which slugs
// exist. The storage itself is engine.StoreWebhook: each conversation's
// messages all or none, 200 only after every commit.
//
// Those slots are few, and hashing a stranger's megabyte costs CPU the real
// traffic needs, so a client address (Server.clientAddr) that keeps failing
// to sign is refused before its body is touched: past
// Config.WebhookFailureLimit posts without a valid signature in a
// Config.WebhookFailureWindow, it gets 429 with Retry-After, unread and
// without a slot, until the window ends (throttle.go). An address that sent
// a valid signature recently (Meta's, or a proxy every delivery comes
// through) is never refused this way: a stranger sharing it cannot lock
// Meta out, and meets the slots instead.
//
// Answers: 200 committed; 400 malformed body, or a phone_number_id that is
// not the tenant's number (nothing of the request is stored); 401 unknown
// tenant or bad or missing signature; 403 failed handshake (unknown tenant
// included); 413 body over Config.MaxWebhookBytes; 429 with Retry-After
// for an address past its failed signatures or handshakes; 503 with Retry-After when
// every unauthenticated-body slot is busy, or when a conversation of the
// delivery stayed held by another transaction past engine.LockTimeout (its
// messages not stored, the others committed: Meta redelivers).

import (
	"context"
	"crypto/hmac"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/mux"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// signatureHeader carries Meta's HMAC of a webhook body.
const signatureHeader = "X-Hub-Signature-256"

// slugPattern is the shape of a tenant slug: anything else is not looked up.
var slugPattern = regexp.MustCompile(`^[a-z0-9-]{1,63}$`)

// webhookRoute is the route of Meta's webhooks.
const webhookRoute = "/webhooks/whatsapp/{tenant}"

// routeWebhooks mounts Meta's webhooks (GET handshake, POST events).
func (s *Server) routeWebhooks(r *mux.Router) {
	r.HandleFunc(webhookRoute, s.whatsappHandshake).Methods(http.MethodGet)
	r.HandleFunc(webhookRoute, s.whatsappEvents).Methods(http.MethodPost)
}

// whatsappChannel returns the channel of the path's tenant; found is false
// for a malformed slug, an unknown tenant and one without a credential alike.
func (s *Server) whatsappChannel(w http.ResponseWriter, r *http.Request) (channel, error) {
	slug := mux.Vars(r)["tenant"]
	if !slugPattern.MatchString(slug) {
		return channel{}, nil
	}
	ch, err := s.channels.get(r.Context(), slug)
	if err != nil || !ch.found {
		return ch, err
	}
	if sw, ok := w.(*statusWriter); ok {
		sw.tenant = ch.tenant.Slug
	}
	return ch, nil
}

// whatsappHandshake answers Meta's subscription check: the challenge as
// text/plain when hub.mode is subscribe and hub.verify_token is the
// tenant's, 403 otherwise (an unknown tenant too).
//
// A failed handshake counts against the client address as an unsigned post
// does, and an address past Config.WebhookFailureLimit of them is answered
// 429 with Retry-After unread: the verify token cannot be guessed at speed.
func (s *Server) whatsappHandshake(w http.ResponseWriter, r *http.Request) {
	addr := s.clientAddr(r)
	if wait := s.unsigned.blocked(addr); wait > 0 && !s.signers.has(addr) {
		s.tooManyUnsigned(w, r, wait)
		return
	}
	ch, err := s.whatsappChannel(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	challenge, ok := whatsapp.VerifyHandshake(r.URL.Query(), ch.cred.VerifyToken)
	if !ch.found || !ok {
		s.unsigned.fail(addr)
		s.writeError(w, r, engine.Errorf(codeForbidden, "hub.mode must be subscribe and hub.verify_token the tenant's verify_token"))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, challenge)
}

// errBadSignature is the one answer for an unknown tenant and a bad
// signature.
var errBadSignature = engine.Errorf(engine.CodeUnauthorized, "%s: missing or not the body's HMAC under the tenant's app_secret", signatureHeader)

// whatsappEvents authenticates, parses and stores one webhook delivery.
// Every post that ends without a valid signature, once it got past the
// throttle, counts against its client address; one whose body waited for a
// slot in vain does not (that is ordo's shortage, not the sender's fault).
func (s *Server) whatsappEvents(w http.ResponseWriter, r *http.Request) {
	addr := s.clientAddr(r)
	if wait := s.unsigned.blocked(addr); wait > 0 && !s.signers.has(addr) {
		s.tooManyUnsigned(w, r, wait)
		return
	}
	limit := s.cfg.MaxWebhookBytes
	if r.ContentLength > limit {
		s.unsigned.fail(addr)
		closeUnread(w)
		s.writeError(w, r, engine.Errorf(engine.CodeTooLarge, "body larger than %d bytes", limit))
		return
	}
	ch, err := s.whatsappChannel(w, r)
	if err != nil {
		closeUnread(w)
		s.writeError(w, r, err)
		return
	}
	if !ch.found {
		s.unsigned.fail(addr)
		closeUnread(w)
		s.writeError(w, r, errBadSignature)
		return
	}
	body, sum, read, err := s.readUnauthenticated(w, r, ch.tenant.Slug, ch.cred.AppSecret)
	if err != nil {
		if read {
			s.unsigned.fail(addr)
		}
		s.writeError(w, r, err)
		return
	}
	if !signatureMatches(sum, r.Header.Get(signatureHeader)) {
		// The app secret may just have changed: check once against a fresh
		// copy before refusing.
		fresh, reloaded, err := s.channels.refresh(r.Context(), ch.tenant.Slug)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if !reloaded || !fresh.found || !whatsapp.VerifySignature(fresh.cred.AppSecret, body, r.Header.Get(signatureHeader)) {
			s.logger.InfoContext(r.Context(), "whatsapp webhook refused: bad or missing signature (is the tenant's app_secret the Meta app's?)",
				slog.String("tenant", ch.tenant.Slug))
			s.unsigned.fail(addr)
			s.writeError(w, r, errBadSignature)
			return
		}
		ch = fresh
	}
	s.signers.add(addr)
	if !utf8.Valid(body) {
		s.writeError(w, r, engine.Errorf(engine.CodeInvalid, "body: not valid UTF-8"))
		return
	}
	wh, err := whatsapp.ParseWebhook(body)
	if err != nil {
		s.writeError(w, r, engine.Errorf(engine.CodeInvalid, "%s", webhookProblem(err)))
		return
	}
	res, err := s.engine.StoreWebhook(r.Context(), engine.WebhookTenant{ID: ch.tenant.ID, Slug: ch.tenant.Slug, PhoneNumberID: ch.cred.PhoneNumberID, PublicBase: s.publicBase(r)}, wh)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// readUnauthenticated reads a webhook body that nobody has vouched for yet:
// in one of the body slots (bodySlots, below: the process's, within the address's
// and the tenant's share; 503 with Retry-After when none frees up within
// Config.UnauthenticatedBodyWait), no slower than Config.WebhookMinRate
// after Config.WebhookMinRateGrace, within Config.WebhookReadTimeout, at
// most Config.MaxWebhookBytes (413 beyond), hashed under secret as it is
// read. It returns the body and its HMAC, and whether it took a slot to
// read it (an error after that is the sender's).
//
// Every answer without a body read whole closes the connection at once
// (closeUnread).
func (s *Server) readUnauthenticated(w http.ResponseWriter, r *http.Request, tenant, secret string) (body, sum []byte, read bool, err error) {
	addr := s.clientAddr(r)
	if err := s.bodies.acquire(r.Context(), s.cfg.UnauthenticatedBodyWait, addr, tenant, s.signers.has(addr)); err != nil {
		closeUnread(w)
		if errors.Is(err, errNoSlot) {
			w.Header().Set("Retry-After", "1")
			return nil, nil, false, engine.Errorf(engine.CodeUnavailable, "too many webhook deliveries in flight; retry shortly")
		}
		return nil, nil, false, engine.Errorf(engine.CodeUnavailable, "request cancelled")
	}
	defer s.bodies.release(addr, tenant)
	body, sum, err = s.readSlotted(w, r, secret)
	if err != nil {
		closeUnread(w)
	}
	return body, sum, true, err
}

// readSlotted is readUnauthenticated's reading, once it holds a slot.
func (s *Server) readSlotted(w http.ResponseWriter, r *http.Request, secret string) ([]byte, []byte, error) {
	// The body's deadline moves with its rate (rateReader); once it is read
	// the connection gets the server's own read deadline back (counted from
	// now, a little after the request began), never none: a connection
	// without one stays open as long as its sender likes (issue 24: 1,000 s).
	// It is not left at the body's deadline either: the server's watch for
	// a closed connection would take that for a hang-up and cancel the
	// request while it is being stored.
	rc := http.NewResponseController(w)
	start := time.Now()
	defer func() { _ = rc.SetReadDeadline(start.Add(s.cfg.ReadTimeout)) }()
	limit := s.cfg.MaxWebhookBytes
	src := &rateReader{r: r.Body, rc: rc, start: start, grace: s.cfg.WebhookMinRateGrace, most: s.cfg.WebhookReadTimeout, minRate: s.cfg.WebhookMinRate}
	body, err := readHashed(src, limit, r.ContentLength, whatsapp.NewMAC(secret))
	switch {
	case errors.Is(err, errTooLarge):
		return nil, nil, engine.Errorf(engine.CodeTooLarge, "body larger than %d bytes", limit)
	case errors.Is(err, errTooSlow) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, os.ErrDeadlineExceeded):
		return nil, nil, engine.Errorf(engine.CodeUnavailable, "body not received in time")
	case err != nil:
		return nil, nil, engine.Errorf(engine.CodeInvalid, "body: could not be read")
	case secret == "":
		return body.data, nil, nil // a credential without app_secret verifies nothing
	}
	return body.data, body.sum, nil
}

// closeUnread ends the connection of a request whose body is left unread,
// once the answer is written: Connection: close, and a read deadline now
// past. Without the deadline the server, closing the body, would still read
// (and drop) up to 256 KiB of it, at whatever pace the sender likes, under
// the server's ReadTimeout (issue 24: every slow connection held for it).
func closeUnread(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
}

var errTooLarge = errors.New("body too large")

// hashed is a body read with its HMAC.
type hashed struct {
	data, sum []byte
}

// readHashed reads at most limit bytes of body into memory and through h,
// with errTooLarge for more. The buffer starts at the declared length (or
// 32 KiB) and never grows past limit, so a stranger's body costs at most
// limit bytes plus the last copy.
func readHashed(body io.Reader, limit, declared int64, h hash.Hash) (hashed, error) {
	size := int64(32 << 10)
	if declared >= 0 {
		size = declared + 1 // one more, to see the end without growing
	}
	buf := make([]byte, 0, min(size, limit+1))
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) > limit {
				return hashed{}, errTooLarge
			}
			grown := make([]byte, len(buf), min(int64(2*cap(buf)), limit+1))
			copy(grown, buf)
			buf = grown
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		h.Write(buf[len(buf) : len(buf)+n])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return hashed{}, errTooLarge
		}
		if errors.Is(err, io.EOF) {
			return hashed{data: buf, sum: h.Sum(nil)}, nil
		}
		if err != nil {
			return hashed{}, err
		}
	}
}

// signatureMatches reports whether header is "sha256=<hex of sum>", in
// constant time; a nil sum (no app secret) matches nothing.
func signatureMatches(sum []byte, header string) bool {
	const prefix = "sha256="
	header = strings.TrimSpace(header)
	if sum == nil || len(header) < len(prefix) || !strings.EqualFold(header[:len(prefix)], prefix) {
		return false
	}
	got, err := hex.DecodeString(header[len(prefix):])
	return err == nil && hmac.Equal(got, sum)
}

// webhookProblem words a parse error for the sender: the JSON path and what
// was wrong, never the Go types encoding/json names.
func webhookProblem(err error) string {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	msg := strings.TrimPrefix(err.Error(), "parse webhook: ")
	switch {
	case errors.As(err, &syntaxErr):
		return "body: not valid JSON"
	case errors.As(err, &typeErr):
		// The parser prefixes where it was ("entry[0].changes[1]: value: ").
		where, _, _ := strings.Cut(msg, "json: ")
		path := strings.TrimSuffix(strings.ReplaceAll(strings.TrimSpace(where), ": ", "."), ":")
		if typeErr.Field != "" {
			path = strings.TrimPrefix(path+"."+typeErr.Field, ".")
		}
		if path == "" {
			path = "body"
		}
		return path + ": must be " + jsonKind(typeErr.Type) + ", not " + typeErr.Value
	case strings.Contains(msg, "json: ") || strings.Contains(msg, "Go "):
		return "body: not a WhatsApp webhook (object, entry[].changes[].value as Meta sends them)"
	}
	return msg
}

// jsonKind names the JSON kind a Go type is decoded from.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "another type"
}

// Slots for webhook bodies nobody has vouched for yet, shared
// fairly: one client address holds at most Config.WebhookBodiesPerAddress
// of them, one tenant's URL at most Config.WebhookBodiesPerTenant, the
// process at most Config.MaxUnauthenticatedBodies. Slow senders from one
// address, or aimed at one slug, cannot take the slots every other sender
// needs (issue 24: two addresses with 40 slow connections each made 27 of
// 31 signed deliveries wait in vain for one of 32 shared slots).
//
// An address that sent a valid signature recently (Meta's, throttle.go) is
// held to its address share but not to the tenant's: a stranger crowding a
// tenant's URL from many addresses cannot starve that tenant's real
// deliveries either.
//
// And a slot is not held for long: a body is read under a deadline that
// moves with what has arrived (rateReader), so one slower than
// Config.WebhookMinRate once Config.WebhookMinRateGrace has passed is cut,
// and any body after Config.WebhookReadTimeout.

// bodySlots counts the slots in use, in total, per address and per tenant.
type bodySlots struct {
	total, perAddr, perTenant int

	mu       sync.Mutex
	used     int
	byAddr   map[string]int
	byTenant map[string]int
	freed    chan struct{} // closed, and replaced, when a slot is released
}

func newBodySlots(total, perAddr, perTenant int) *bodySlots {
	return &bodySlots{total: total, perAddr: perAddr, perTenant: perTenant,
		byAddr: map[string]int{}, byTenant: map[string]int{}, freed: make(chan struct{})}
}

// take takes a slot for addr on tenant's URL if the shares allow it; a
// signer is not held to the tenant's share. Without a slot it returns a
// channel closed when one is next released.
func (b *bodySlots) take(addr, tenant string, signer bool) (bool, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used >= b.total || b.byAddr[addr] >= b.perAddr || (!signer && b.byTenant[tenant] >= b.perTenant) {
		return false, b.freed
	}
	b.used++
	b.byAddr[addr]++
	b.byTenant[tenant]++
	return true, nil
}

// release gives back a slot taken for addr on tenant's URL.
func (b *bodySlots) release(addr, tenant string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used--
	if b.byAddr[addr]--; b.byAddr[addr] <= 0 {
		delete(b.byAddr, addr)
	}
	if b.byTenant[tenant]--; b.byTenant[tenant] <= 0 {
		delete(b.byTenant, tenant)
	}
	close(b.freed)
	b.freed = make(chan struct{})
}

// acquire waits up to wait for a slot; release it with release.
func (b *bodySlots) acquire(ctx context.Context, wait time.Duration, addr, tenant string, signer bool) error {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		ok, freed := b.take(addr, tenant, signer)
		if ok {
			return nil
		}
		select {
		case <-freed:
		case <-timer.C:
			return errNoSlot
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

var (
	errNoSlot  = errors.New("no body slot free")
	errTooSlow = errors.New("body arrives too slowly")
)

// rateReader reads a body under a read deadline that moves with what has
// arrived: start plus the longer of grace and the time the bytes so far
// (and one more) take at minRate, never past start plus most. A sender of
// a byte a second is cut once grace has passed; one that keeps up with
// minRate may take up to most. Where the connection's deadline cannot be
// set (a handler served without a server, in tests) the same bound is
// checked after each read.
type rateReader struct {
	r       io.Reader
	rc      *http.ResponseController
	start   time.Time
	grace   time.Duration
	most    time.Duration
	minRate int64 // bytes per second
	n       int64
}

func (s *rateReader) due() time.Time {
	need := time.Duration(float64(s.n+1) / float64(s.minRate) * float64(time.Second))
	return s.start.Add(min(max(s.grace, need), s.most))
}

func (s *rateReader) Read(p []byte) (int, error) {
	due := s.due()
	_ = s.rc.SetReadDeadline(due)
	n, err := s.r.Read(p)
	s.n += int64(n)
	if err == nil && time.Now().After(due) {
		err = errTooSlow
	}
	return n, err
}
