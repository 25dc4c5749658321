package tenants

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"time"
	"unicode/utf8"

	ordosql "github.com/ordo-dev/ordo/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Tenant is a business on the platform and the settings that steer how its
// messages are processed. It carries no secrets.
type Tenant struct {
	// ID is the database identity; other tables reference it.
	ID int64 `json:"id"`
	// Slug names the tenant in URLs and commands: [a-z0-9-]{1,63}.
	Slug string `json:"slug"`
	// Name is a human label, at most 200 characters; empty by default.
	Name string `json:"name"`
	// HandlerURL receives inbound messages for replies; empty means inbound
	// messages are kept and marked done with no replies.
	HandlerURL string `json:"handler_url"`
	// OnDeadLetter is what a conversation does when one of its messages is
	// dead-lettered: "halt" (default) or "skip".
	OnDeadLetter string `json:"on_dead_letter"`
	// Ambiguous is what a send with an unknown outcome does: "reconcile"
	// (default) or "resend".
	Ambiguous string `json:"ambiguous"`
	// MaxAttempts is how many attempts a step gets before its message is
	// dead-lettered, 1..100; 8 by default.
	MaxAttempts int `json:"max_attempts"`
	// SendRate is how many WhatsApp sends per second its phone number gets,
	// paced across every worker process; 80 by default (Meta's default
	// throughput), 0 for unpaced.
	SendRate int `json:"send_rate"`
	// PairGapMS is the minimum gap between two sends to one user, in
	// milliseconds (Meta's pair rate); 0 (default) is off.
	PairGapMS int `json:"pair_gap_ms"`
	// SendingPausedAt is set while the tenant's sending is paused because
	// Meta refused its credential or account; ResumeSending lifts it.
	SendingPausedAt *time.Time `json:"sending_paused_at,omitempty"`
	// SendingPausedReason says why sending is paused.
	SendingPausedReason string `json:"sending_paused_reason,omitempty"`
	// CreatedAt is when the tenant was created.
	CreatedAt time.Time `json:"created_at"`
	// Retention is how long a finished message keeps its content (payload,
	// steps, resolved dead letters) before the pruner removes it; its dedupe
	// record stays for ever. RetentionDefault unless changed; 0 keeps all.
	Retention Retention `json:"retention"`
	// Weight is the tenant's share of the workers when several tenants have
	// runnable conversations, 1..1000; WeightDefault unless changed.
	Weight int `json:"weight"`
	// MaxConcurrency caps the tenant's conversations drained at once across
	// every worker process, 0..10000; 0 (default) is no cap beyond the
	// fair share.
	MaxConcurrency int `json:"max_concurrency"`
	// HandlerMode is how the handler answers: "sync" (default: the replies
	// in the answer), "async" (posted later to /v1/messages/{id}/replies) or
	// "notify" (any 2xx is done).
	HandlerMode string `json:"handler_mode"`
	// HandlerTimeoutMS bounds one handler call, in milliseconds;
	// HandlerTimeoutDefault unless changed.
	HandlerTimeoutMS int `json:"handler_timeout_ms"`
	// RetryTimeouts makes a sync handler call that timed out be made again
	// (within max_attempts). Off by default: the workflow may still be
	// running, and a retry would run it (and its AI step) once more.
	RetryTimeouts bool `json:"retry_timeouts"`
	// ReplyDeadlineMS is how long an async handler has to post its replies,
	// in milliseconds; ReplyDeadlineDefault unless changed.
	ReplyDeadlineMS int `json:"reply_deadline_ms"`
	// EventsURL receives the tenant's events (message.sent, …); empty: none.
	EventsURL string `json:"events_url"`
	// HandlerDownSince is set while the tenant's handler is unreachable
	// (refused connections, DNS failures, 404/410, 502/503/504): its
	// conversations that need the handler wait, one probe at a time looks
	// for it, and they go on in order when it answers. Read from the
	// tenant's row of ordo.dependencies (as NumberDownSince), not a column
	// of the tenant: set only by the drains.
	HandlerDownSince *time.Time `json:"handler_down_since,omitempty"`
	// HandlerDownReason is the last probe's failure while the handler is
	// unreachable.
	HandlerDownReason string `json:"handler_down_reason,omitempty"`
	// HandlerOutageLimitMS is how long the handler — or the WhatsApp number
	// (NumberDownSince) — may be unreachable before its messages are
	// retried and dead-lettered as usual, in milliseconds;
	// HandlerOutageLimitDefault unless changed (Meta retries its webhooks
	// for about as long).
	HandlerOutageLimitMS int64 `json:"handler_outage_limit_ms"`
	// NumberDownSince is set while the tenant's WhatsApp number is
	// unreachable through the Cloud API (5xx answers, Meta's "service
	// unavailable" codes, refused connections or timeouts for several
	// different messages): its sends wait, one probe send at a time looks
	// for it, and they go on in order when the Cloud API answers. Past
	// HandlerOutageLimitMS its failures count as attempts again.
	NumberDownSince *time.Time `json:"number_down_since,omitempty"`
	// NumberDownReason is the last probe's failure while the number is
	// unreachable.
	NumberDownReason string `json:"number_down_reason,omitempty"`
	// MarkRead: each inbound message received through the webhook that
	// goes to the handler is marked read, with a typing indicator, before
	// its replies are sent (jobs/markread.go). Off by default.
	MarkRead bool `json:"mark_read"`
}

// Redacted returns t with any password in its URLs replaced by "xxxxx":
// for display. A handler URL with credentials is refused since issue 16,
// but one stored before is still used as it is, and never printed.
func (t Tenant) Redacted() Tenant {
	for _, u := range []*string{&t.HandlerURL, &t.EventsURL} {
		if p, err := url.Parse(*u); err == nil && p.User != nil {
			*u = p.Redacted()
			if _, hasPassword := p.User.Password(); !hasPassword {
				p.User = url.User("xxxxx") // a lone user name may be the secret
				*u = p.String()
			}
		}
	}
	return t
}

// Defaults of the settings a tenant starts with (the columns' defaults in
// sql/migrations/000004_tenant_settings.up.sql; HandlerTimeoutDefault since
// 000040_handler_timeouts.up.sql: long enough for an n8n workflow's AI step).
const (
	WeightDefault         = 1
	HandlerModeDefault    = "sync"
	HandlerTimeoutDefault = 120 * time.Second
	ReplyDeadlineDefault  = 10 * time.Minute
	// HandlerOutageLimitDefault is how long a tenant's handler may be
	// unreachable before its messages are dead-lettered.
	HandlerOutageLimitDefault = 24 * time.Hour
)

// tenantColumns is what every read of a tenant selects, in scanTenant's
// order. Its handler's and number's state come last, from its rows of
// ordo.dependencies (none: reachable) in one subquery — one index probe
// where a subquery per column took four, on every drain's read of its
// tenant — as one record (scanTenant).
const tenantColumns = `id, slug, name, COALESCE(handler_url, ''), on_dead_letter, ambiguous, max_attempts, send_rate, pair_gap_ms,
       sending_paused_at, COALESCE(sending_paused_reason, ''), created_at, extract(epoch FROM retention)::bigint,
       weight, max_concurrency, handler_mode, handler_timeout_ms, reply_deadline_ms, COALESCE(events_url, ''),
       handler_outage_limit_ms, mark_read, retry_timeouts,
       (SELECT ROW(max(d.down_since) FILTER (WHERE d.what = 'handler'), COALESCE(max(d.down_reason) FILTER (WHERE d.what = 'handler'), ''),
                   max(d.down_since) FILTER (WHERE d.what = 'number'), COALESCE(max(d.down_reason) FILTER (WHERE d.what = 'number'), ''))
        FROM ordo.dependencies d WHERE d.tenant_id = tenants.id)`

// Querier is what a write runs on: the pool, or a caller's transaction
// (sql.Querier).
type Querier = ordosql.Querier

// Store reads and writes tenants and their API keys. It is safe for concurrent
// use.
type Store struct {
	pool     *pgxpool.Pool
	vault    *Vault
	outbound OutboundPolicy // checks handler_url and events_url when set (outbound.go)
}

// NewStore returns a Store on pool. vault keeps each tenant's handler secret;
// it may be nil for callers that never create tenants or read handler secrets
// (those methods then fail).
func NewStore(pool *pgxpool.Pool, vault *Vault) *Store {
	return &Store{pool: pool, vault: vault}
}

// WithOutbound returns a copy of s that checks the handler and events URLs
// it is given against policy's operator lists as well as the built-in
// refusals (which apply without it too).
func (s *Store) WithOutbound(policy OutboundPolicy) *Store {
	c := *s
	c.outbound = policy
	return &c
}

// CreateParams are a new tenant's settings. The policies start at their
// defaults and are changed with Update.
type CreateParams struct {
	// Slug is required: [a-z0-9-]{1,63}, unique.
	Slug string
	// Name is optional, at most 200 characters.
	Name string
	// HandlerURL is optional: an absolute http or https URL.
	HandlerURL string
}

// Created is a new tenant with the secrets that are shown only once.
type Created struct {
	// Tenant is the stored tenant.
	Tenant Tenant
	// APIKey is the tenant's first API key; only its hash is stored.
	APIKey string
	// HandlerSecret is the key of the HMAC that signs calls to the tenant's
	// handler (X-Ordo-Signature), as the tenant configures it: 64 hex digits.
	HandlerSecret string
}

// HandlerCredential is the vault name of a tenant's handler secret, stored as
// {"secret": "<hex>"}.
const HandlerCredential = "handler"

const insertTenant = `
INSERT INTO ordo.tenants (slug, name, handler_url)
VALUES ($1, $2, NULLIF($3, ''))
RETURNING ` + tenantColumns

// Create stores a tenant together with its first API key and a random handler
// secret, in one transaction: either all three exist afterwards or none.
func (s *Store) Create(ctx context.Context, p CreateParams) (Created, error) {
	var out Created
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = s.CreateTx(ctx, tx, p)
		return err
	})
	return out, err
}

// CreateTx is Create inside the caller's transaction tx (an endpoint that
// audits the creation in the same transaction).
func (s *Store) CreateTx(ctx context.Context, tx pgx.Tx, p CreateParams) (Created, error) {
	if err := validateSlug(p.Slug); err != nil {
		return Created{}, err
	}
	if err := validateName(p.Name); err != nil {
		return Created{}, err
	}
	if err := s.validateURL("handler_url", p.HandlerURL); err != nil {
		return Created{}, err
	}
	if s.vault == nil {
		return Created{}, errors.New("create tenant: no credential vault configured")
	}
	secretBytes := make([]byte, 32)
	if _, err := rand.Read(secretBytes); err != nil {
		return Created{}, fmt.Errorf("create tenant: generate handler secret: %w", err)
	}
	secret := hex.EncodeToString(secretBytes)
	secretJSON, err := json.Marshal(map[string]string{"secret": secret})
	if err != nil {
		return Created{}, fmt.Errorf("create tenant: encode handler secret: %w", err)
	}
	// A savepoint, so that a refused slug leaves the caller's transaction usable.
	var out Created
	err = pgx.BeginFunc(ctx, tx, func(tx pgx.Tx) error {
		out, err = s.create(ctx, tx, p, secret, secretJSON)
		return err
	})
	if err != nil {
		return Created{}, fmt.Errorf("create tenant: %w", err)
	}
	return out, nil
}

func (s *Store) create(ctx context.Context, tx pgx.Tx, p CreateParams, secret string, secretJSON []byte) (Created, error) {
	var out Created
	err := func() error {
		t, err := scanTenant(tx.QueryRow(ctx, insertTenant, p.Slug, p.Name, p.HandlerURL))
		if err != nil {
			if isUniqueViolation(err, "tenants_slug_key") {
				return fmt.Errorf("tenant %q: %w", p.Slug, ErrExists)
			}
			return fmt.Errorf("insert tenant: %w", err)
		}
		key, _, err := createAPIKey(ctx, tx, t.ID)
		if err != nil {
			return err
		}
		if err := s.vault.Put(ctx, tx, t.ID, HandlerCredential, secretJSON); err != nil {
			return fmt.Errorf("store handler secret: %w", err)
		}
		out = Created{Tenant: t, APIKey: key, HandlerSecret: secret}
		return nil
	}()
	return out, err
}

// UpdateParams are the settings to change; nil fields are left as they are.
type UpdateParams struct {
	// HandlerURL, if set, replaces the handler URL; "" removes it.
	HandlerURL *string
	// Name, if set, replaces the name.
	Name *string
	// OnDeadLetter, if set, is "halt" or "skip".
	OnDeadLetter *string
	// Ambiguous, if set, is "reconcile" or "resend".
	Ambiguous *string
	// MaxAttempts, if set, is 1..100.
	MaxAttempts *int
	// SendRate, if set, is 0 (unpaced)..100000 sends per second.
	SendRate *int
	// PairGapMS, if set, is 0 (off)..86400000 milliseconds.
	PairGapMS *int
	// Retention, if set, is how long finished messages keep their content;
	// 0 keeps it for ever.
	Retention *Retention
	// Weight, if set, is 1..1000.
	Weight *int
	// MaxConcurrency, if set, is 0 (no cap)..10000.
	MaxConcurrency *int
	// HandlerMode, if set, is "sync", "async" or "notify".
	HandlerMode *string
	// HandlerTimeoutMS, if set, is 1000..600000 milliseconds.
	HandlerTimeoutMS *int
	// ReplyDeadlineMS, if set, is 1000..86400000 milliseconds.
	ReplyDeadlineMS *int
	// EventsURL, if set, replaces the events URL; "" removes it.
	EventsURL *string
	// HandlerOutageLimitMS, if set, is 60000 (1 min)..604800000 (7 days).
	HandlerOutageLimitMS *int64
	// MarkRead, if set, turns read receipts with a typing indicator on or
	// off.
	MarkRead *bool
	// RetryTimeouts, if set, says whether a sync handler call that timed
	// out is made again.
	RetryTimeouts *bool
}

func (p UpdateParams) validate(s *Store) error {
	if p.Weight != nil && (*p.Weight < 1 || *p.Weight > 1000) {
		return invalid("weight", "must be between 1 and 1000")
	}
	if p.MaxConcurrency != nil && (*p.MaxConcurrency < 0 || *p.MaxConcurrency > 10000) {
		return invalid("max_concurrency", "must be between 0 (no cap) and 10000")
	}
	if p.HandlerMode != nil && *p.HandlerMode != "sync" && *p.HandlerMode != "async" && *p.HandlerMode != "notify" {
		return invalid("handler_mode", "must be sync, async or notify")
	}
	if p.HandlerTimeoutMS != nil && (*p.HandlerTimeoutMS < 1000 || *p.HandlerTimeoutMS > 600000) {
		return invalid("handler_timeout", "must be between 1s and 10m")
	}
	if p.ReplyDeadlineMS != nil && (*p.ReplyDeadlineMS < 1000 || *p.ReplyDeadlineMS > 86400000) {
		return invalid("reply_deadline", "must be between 1s and 24h")
	}
	if p.HandlerOutageLimitMS != nil && (*p.HandlerOutageLimitMS < 60000 || *p.HandlerOutageLimitMS > 604800000) {
		return invalid("handler_outage_limit", "must be between 1m and 168h")
	}
	if p.EventsURL != nil {
		if err := s.validateURL("events_url", *p.EventsURL); err != nil {
			return err
		}
	}
	if p.HandlerURL != nil {
		if err := s.validateURL("handler_url", *p.HandlerURL); err != nil {
			return err
		}
	}
	if p.Name != nil {
		if err := validateName(*p.Name); err != nil {
			return err
		}
	}
	if p.OnDeadLetter != nil && *p.OnDeadLetter != "halt" && *p.OnDeadLetter != "skip" {
		return invalid("on_dead_letter", "must be halt or skip")
	}
	if p.Ambiguous != nil && *p.Ambiguous != "reconcile" && *p.Ambiguous != "resend" {
		return invalid("ambiguous", "must be reconcile or resend")
	}
	if p.MaxAttempts != nil && (*p.MaxAttempts < 1 || *p.MaxAttempts > 100) {
		return invalid("max_attempts", "must be between 1 and 100")
	}
	if p.SendRate != nil && (*p.SendRate < 0 || *p.SendRate > 100000) {
		return invalid("send_rate", "must be between 0 (unpaced) and 100000")
	}
	if p.PairGapMS != nil && (*p.PairGapMS < 0 || *p.PairGapMS > 86400000) {
		return invalid("pair_gap", "must be between 0 (off) and 24h")
	}
	if p.Retention != nil && (*p.Retention < 0 || (*p.Retention > 0 && time.Duration(*p.Retention) < RetentionMin)) {
		return invalid("retention", "must be 0 (keep for ever) or at least %s", RetentionMin)
	}
	return nil
}

// updateTenant leaves a column alone when its parameter is NULL. handler_url
// is special: an empty string stores NULL, which means "no handler".
const updateTenant = `
UPDATE ordo.tenants SET
    handler_url    = CASE WHEN $2::text IS NULL THEN handler_url ELSE NULLIF($2::text, '') END,
    name           = COALESCE($3::text, name),
    on_dead_letter = COALESCE($4::text, on_dead_letter),
    ambiguous      = COALESCE($5::text, ambiguous),
    max_attempts   = COALESCE($6::int, max_attempts),
    send_rate      = COALESCE($7::int, send_rate),
    pair_gap_ms    = COALESCE($8::int, pair_gap_ms),
    retention      = COALESCE(make_interval(secs => $9::bigint), retention),
    weight             = COALESCE($10::int, weight),
    max_concurrency    = COALESCE($11::int, max_concurrency),
    handler_mode       = COALESCE($12::text, handler_mode),
    handler_timeout_ms = COALESCE($13::int, handler_timeout_ms),
    reply_deadline_ms  = COALESCE($14::int, reply_deadline_ms),
    events_url         = CASE WHEN $15::text IS NULL THEN events_url ELSE NULLIF($15::text, '') END,
    handler_outage_limit_ms = COALESCE($16::bigint, handler_outage_limit_ms),
    mark_read          = COALESCE($17::bool, mark_read),
    retry_timeouts     = COALESCE($18::boolean, retry_timeouts)
WHERE slug = $1
RETURNING ` + tenantColumns

// Update changes the settings of the tenant with slug and returns the result.
func (s *Store) Update(ctx context.Context, slug string, p UpdateParams) (Tenant, error) {
	return s.UpdateTx(ctx, s.pool, slug, p)
}

// UpdateTx is Update on q, the caller's transaction.
func (s *Store) UpdateTx(ctx context.Context, q Querier, slug string, p UpdateParams) (Tenant, error) {
	if err := p.validate(s); err != nil {
		return Tenant{}, err
	}
	t, err := scanTenant(q.QueryRow(ctx, updateTenant,
		slug, p.HandlerURL, p.Name, p.OnDeadLetter, p.Ambiguous, p.MaxAttempts, p.SendRate, p.PairGapMS, p.Retention.seconds(),
		p.Weight, p.MaxConcurrency, p.HandlerMode, p.HandlerTimeoutMS, p.ReplyDeadlineMS, p.EventsURL, p.HandlerOutageLimitMS, p.MarkRead, p.RetryTimeouts))
	if err != nil {
		return Tenant{}, fmt.Errorf("update tenant %q: %w", slug, notFound(err))
	}
	return t, nil
}

const selectTenantBySlug = `
SELECT ` + tenantColumns + `
FROM ordo.tenants WHERE slug = $1`

// BySlug returns the tenant with slug, or ErrNotFound.
func (s *Store) BySlug(ctx context.Context, slug string) (Tenant, error) {
	return s.BySlugTx(ctx, s.pool, slug)
}

// BySlugTx is BySlug on q.
func (s *Store) BySlugTx(ctx context.Context, q Querier, slug string) (Tenant, error) {
	t, err := scanTenant(q.QueryRow(ctx, selectTenantBySlug, slug))
	if err != nil {
		return Tenant{}, fmt.Errorf("read tenant %q: %w", slug, notFound(err))
	}
	return t, nil
}

const resumeSending = `SELECT ordo.resume_sending(id) FROM ordo.tenants WHERE slug = $1`

// ResumeSending lifts the sending pause of the tenant with slug (set when
// Meta refused its credential or account) and wakes its waiting
// conversations, which go on in order. resumed is false when sending was not
// paused. ErrNotFound for an unknown slug.
func (s *Store) ResumeSending(ctx context.Context, slug string) (resumed bool, err error) {
	return s.ResumeSendingTx(ctx, s.pool, slug)
}

// ResumeSendingTx is ResumeSending on q.
func (s *Store) ResumeSendingTx(ctx context.Context, q Querier, slug string) (resumed bool, err error) {
	if err := q.QueryRow(ctx, resumeSending, slug).Scan(&resumed); err != nil {
		return false, fmt.Errorf("resume sending of tenant %q: %w", slug, notFound(err))
	}
	return resumed, nil
}

// pauseSending is an operator's pause: the same mark Meta's refusals set,
// so drains wait on it the same way and ordo.resume_sending lifts it. Only
// the tenant row is locked (sql/LOCKING.md level 1).
const pauseSending = `
WITH t AS (SELECT id, sending_paused_at IS NULL AS running FROM ordo.tenants WHERE slug = $1 FOR NO KEY UPDATE)
UPDATE ordo.tenants SET sending_paused_at = now(), sending_paused_reason = $2
FROM t WHERE ordo.tenants.id = t.id AND t.running
RETURNING true`

// PauseReasonMaxLength bounds an operator's pause reason, in characters.
const PauseReasonMaxLength = 200

// PauseSendingTx pauses the sending of the tenant with slug on q, with
// reason shown beside it; its conversations wait (holding no worker) until
// ResumeSending. paused is false when sending was already paused.
func (s *Store) PauseSendingTx(ctx context.Context, q Querier, slug, reason string) (paused bool, err error) {
	if !utf8.ValidString(reason) || utf8.RuneCountInString(reason) > PauseReasonMaxLength {
		return false, invalid("reason", "must be text of at most %d characters", PauseReasonMaxLength)
	}
	if _, err := s.BySlugTx(ctx, q, slug); err != nil {
		return false, err
	}
	err = q.QueryRow(ctx, pauseSending, slug, reason).Scan(&paused)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pause sending of tenant %q: %w", slug, err)
	}
	return paused, nil
}

const selectTenantByID = `
SELECT ` + tenantColumns + `
FROM ordo.tenants WHERE id = $1`

// ByID returns the tenant with id, or ErrNotFound.
func (s *Store) ByID(ctx context.Context, id int64) (Tenant, error) {
	t, err := scanTenant(s.pool.QueryRow(ctx, selectTenantByID, id))
	if err != nil {
		return Tenant{}, fmt.Errorf("read tenant %d: %w", id, notFound(err))
	}
	return t, nil
}

// QueueByID queues the read of the tenant with id into b, for a caller
// that sends it with statements of its own in one round trip (a drain's
// claim): when b has run, *dst holds the tenant and *found says it exists.
func QueueByID(b *pgx.Batch, id int64, dst *Tenant, found *bool) {
	b.Queue(selectTenantByID, id).QueryRow(func(row pgx.Row) error {
		t, err := scanTenant(row)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err == nil {
			*dst, *found = t, true
		}
		return err
	})
}

const selectTenants = `
SELECT ` + tenantColumns + `
FROM ordo.tenants ORDER BY slug`

// List returns every tenant, ordered by slug.
func (s *Store) List(ctx context.Context) ([]Tenant, error) {
	rows, err := s.pool.Query(ctx, selectTenants)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Tenant, error) { return scanTenant(r) })
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return out, nil
}

// HandlerSecret returns the HMAC key that signs calls to the tenant's handler:
// the bytes of the hex string the tenant was given, which is what the tenant's
// side (e.g. an n8n Crypto node) uses as its key.
func (s *Store) HandlerSecret(ctx context.Context, tenantID int64) ([]byte, error) {
	return s.HandlerSecretOn(ctx, s.pool, tenantID)
}

// HandlerSecretOn is HandlerSecret read through q (a drain's own connection).
func (s *Store) HandlerSecretOn(ctx context.Context, q Querier, tenantID int64) ([]byte, error) {
	if s.vault == nil {
		return nil, errors.New("read handler secret: no credential vault configured")
	}
	raw, err := s.vault.GetOn(ctx, q, tenantID, HandlerCredential)
	if err != nil {
		return nil, fmt.Errorf("read handler secret: %w", err)
	}
	var v struct {
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(raw, &v); err != nil || v.Secret == "" {
		return nil, fmt.Errorf("read handler secret of tenant %d: credential %q has no \"secret\" string: %w", tenantID, HandlerCredential, ErrUnreadable)
	}
	return []byte(v.Secret), nil
}

func scanTenant(row pgx.Row) (Tenant, error) {
	var t Tenant
	var retention int64
	err := row.Scan(&t.ID, &t.Slug, &t.Name, &t.HandlerURL, &t.OnDeadLetter, &t.Ambiguous, &t.MaxAttempts,
		&t.SendRate, &t.PairGapMS, &t.SendingPausedAt, &t.SendingPausedReason, &t.CreatedAt, &retention,
		&t.Weight, &t.MaxConcurrency, &t.HandlerMode, &t.HandlerTimeoutMS, &t.ReplyDeadlineMS, &t.EventsURL,
		&t.HandlerOutageLimitMS, &t.MarkRead, &t.RetryTimeouts,
		pgtype.CompositeFields{&t.HandlerDownSince, &t.HandlerDownReason, &t.NumberDownSince, &t.NumberDownReason})
	t.Retention = Retention(time.Duration(retention) * time.Second)
	return t, err
}

// notFound turns pgx.ErrNoRows into ErrNotFound and leaves other errors alone.
func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

var slugPattern = regexp.MustCompile(`^[a-z0-9-]{1,63}$`)

func validateSlug(slug string) error {
	if slug == "" {
		return invalid("slug", "required")
	}
	if !slugPattern.MatchString(slug) {
		return invalid("slug", "must be 1 to 63 characters of a-z, 0-9 and -")
	}
	return nil
}

func validateName(name string) error {
	if !utf8.ValidString(name) {
		return invalid("name", "must be UTF-8 text")
	}
	if utf8.RuneCountInString(name) > 200 {
		return invalid("name", "must be at most 200 characters")
	}
	return nil
}

// validateURL accepts "" (none) or an absolute http(s) URL for field that
// the outbound address policy allows.
func (s *Store) validateURL(field, u string) error {
	if err := validateURL(field, u); err != nil {
		return err
	}
	return s.outbound.CheckURL(field, u)
}

// validateURL accepts "" (none) or an absolute http(s) URL for field.
func validateURL(field, s string) error {
	if s == "" {
		return nil
	}
	if len(s) > 2048 {
		return invalid(field, "must be at most 2048 characters")
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return invalid(field, "must be an absolute http or https URL")
	}
	if u.User != nil {
		// Userinfo would be stored in plain text and printed by every
		// command that shows the tenant.
		return invalid(field, "must not carry credentials (user:password@): store the handler's Basic Auth or Header Auth "+
			"encrypted with `ordo credential set --tenant <slug> --name %s --from-file -` "+
			`({"basic_user": "…", "basic_password": "…"} or {"header": "<name>", "value": "<secret>"})`, HandlerAuthCredential)
	}
	return nil
}
