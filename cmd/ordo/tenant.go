package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/tenants"
)

const tenantUsage = "ordo tenant create --slug S [--name N] [--handler-url U] | " +
	"update --slug S [--handler-url U] [--name N] [--on-dead-letter halt|skip] [--ambiguous reconcile|resend] [--max-attempts N] " +
	"[--send-rate N] [--pair-gap D] [--retention 30d|0] [--weight W] [--max-concurrency N] " +
	"[--handler-mode sync|async|notify] [--handler-timeout D] [--reply-deadline D] [--events-url U] [--handler-outage-limit D] [--mark-read=true|false] [--retry-timeouts[=false]] | pause --slug S [--reason R] | resume --slug S | sql-role --slug S | list"

// runTenant is `ordo tenant create|update|pause|resume|list`.
func runTenant(ctx context.Context, env *cli.Env, args []string) error {
	action, rest, err := subcommand(args, tenantUsage)
	if err != nil {
		return err
	}
	switch action {
	case "create":
		return tenantCreate(ctx, env, rest)
	case "update":
		return tenantUpdate(ctx, env, rest)
	case "pause":
		return tenantPause(ctx, env, rest)
	case "resume":
		return tenantResume(ctx, env, rest)
	case "list":
		return tenantList(ctx, env, rest)
	case "sql-role":
		return tenantSQLRole(ctx, env, rest)
	default:
		return fmt.Errorf("unknown tenant action %q; usage: %s", action, tenantUsage)
	}
}

// tenantSQLRole creates a database login role for the tenant's own
// applications and prints its name and password: the only time the password
// is shown. The role can call ordo.enqueue_my_message (for this tenant only)
// and read ordo.my_messages, nothing else.
func tenantSQLRole(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo tenant sql-role")
	slug := fs.String("slug", "", "the tenant whose applications get the role (required)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := requireFlag("slug", *slug); err != nil {
		return err
	}
	pool, store, err := openTenantStore(ctx, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	var r tenants.AppRole
	err = audited(ctx, env, pool, func(tx pgx.Tx) (engine.AuditEntry, error) {
		var err error
		if r, err = store.CreateAppRoleTx(ctx, tx, *slug); err != nil {
			return engine.AuditEntry{}, err
		}
		return engine.AuditEntry{Action: "tenant.sql_role", Tenant: *slug, Details: auditDetails(map[string]string{"role": r.Role})}, nil
	})
	if err != nil {
		return err
	}
	return cli.PrintJSON(env.Stdout, r)
}

// tenantCreate prints the new tenant's API key and handler secret: the only
// time either is shown.
func tenantCreate(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo tenant create")
	slug := fs.String("slug", "", "the tenant's slug, [a-z0-9-]{1,63} (required)")
	name := fs.String("name", "", "a human name")
	handlerURL := fs.String("handler-url", "", "where inbound messages are POSTed for replies")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := requireFlag("slug", *slug); err != nil {
		return err
	}
	pool, store, _, err := openStores(ctx, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	var c tenants.Created
	err = audited(ctx, env, pool, func(tx pgx.Tx) (engine.AuditEntry, error) {
		var err error
		if c, err = store.CreateTx(ctx, tx, tenants.CreateParams{Slug: *slug, Name: *name, HandlerURL: *handlerURL}); err != nil {
			return engine.AuditEntry{}, err
		}
		return engine.AuditEntry{Action: "tenant.create", Tenant: c.Tenant.Slug,
			Details: auditDetails(map[string]any{"name": c.Tenant.Name, "handler_url_set": *handlerURL != ""})}, nil
	})
	if err != nil {
		return err
	}
	return cli.PrintJSON(env.Stdout, struct {
		Tenant        string `json:"tenant"`
		APIKey        string `json:"api_key"`
		HandlerSecret string `json:"handler_secret"`
	}{c.Tenant.Slug, c.APIKey, c.HandlerSecret})
}

// tenantUpdate changes only the settings whose flags were given.
func tenantUpdate(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo tenant update")
	slug := fs.String("slug", "", "the tenant to change (required)")
	handlerURL := fs.String("handler-url", "", `where inbound messages are POSTed; "" removes the handler`)
	name := fs.String("name", "", "a human name")
	onDeadLetter := fs.String("on-dead-letter", "", "halt or skip the conversation when a message is dead-lettered")
	ambiguous := fs.String("ambiguous", "", "reconcile or resend a send whose outcome is unknown")
	maxAttempts := fs.Int("max-attempts", 0, "attempts a step gets before its message is dead-lettered, 1..100")
	sendRate := fs.Int("send-rate", 0, "WhatsApp sends per second for the tenant's phone number (default 80); 0 is unpaced")
	pairGap := fs.Duration("pair-gap", 0, "minimum gap between two sends to one user, e.g. 6s; 0 is off")
	retention := fs.String("retention", "", fmt.Sprintf("how long finished messages keep their content, e.g. 30d or 12h (default %s); "+
		"0 keeps it for ever; the dedupe record is kept for ever either way", tenants.Retention(tenants.RetentionDefault)))
	weight := fs.Int("weight", 0, fmt.Sprintf("the tenant's share of the workers when several tenants have work, 1..1000 (default %d)", tenants.WeightDefault))
	maxConc := fs.Int("max-concurrency", 0, "conversations of the tenant drained at once across every worker process; 0 (default) is no cap beyond the fair share")
	handlerMode := fs.String("handler-mode", "", fmt.Sprintf("how the handler answers: sync (replies in the answer), async (replies posted to /v1/messages/{id}/replies) or notify (any 2xx is done) (default %s)", tenants.HandlerModeDefault))
	handlerTimeout := fs.Duration("handler-timeout", 0, fmt.Sprintf("how long one handler call may take, 1s..10m (default %s)", tenants.HandlerTimeoutDefault))
	replyDeadline := fs.Duration("reply-deadline", 0, fmt.Sprintf("how long an async handler has to post its replies, 1s..24h (default %s)", tenants.ReplyDeadlineDefault))
	eventsURL := fs.String("events-url", "", `where the tenant's events are POSTed; "" removes it`)
	outageLimit := fs.Duration("handler-outage-limit", 0, fmt.Sprintf("how long the handler (refusing connections, 404, 502-504) or the WhatsApp number (the Cloud API's 5xx, refused connections, timeouts) may be unreachable while the conversations wait, before messages are dead-lettered, 1m..168h (default %s)", tenants.HandlerOutageLimitDefault))
	markRead := fs.Bool("mark-read", false, "mark each inbound message read, with a typing indicator, before its handler's replies are sent (--mark-read=true; default off)")
	retryTimeouts := fs.Bool("retry-timeouts", false, "make a sync handler call that timed out again (default false: the workflow may still be running, and a retry runs it once more)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := requireFlag("slug", *slug); err != nil {
		return err
	}
	var (
		p        tenants.UpdateParams
		parseErr error
	)
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "handler-url":
			p.HandlerURL = handlerURL
		case "name":
			p.Name = name
		case "on-dead-letter":
			p.OnDeadLetter = onDeadLetter
		case "ambiguous":
			p.Ambiguous = ambiguous
		case "max-attempts":
			p.MaxAttempts = maxAttempts
		case "send-rate":
			p.SendRate = sendRate
		case "pair-gap":
			ms := int(pairGap.Milliseconds())
			p.PairGapMS = &ms
		case "retention":
			r, err := tenants.ParseRetention(*retention)
			parseErr = err
			p.Retention = &r
		case "weight":
			p.Weight = weight
		case "max-concurrency":
			p.MaxConcurrency = maxConc
		case "handler-mode":
			p.HandlerMode = handlerMode
		case "handler-timeout":
			ms := int(handlerTimeout.Milliseconds())
			p.HandlerTimeoutMS = &ms
		case "reply-deadline":
			ms := int(replyDeadline.Milliseconds())
			p.ReplyDeadlineMS = &ms
		case "events-url":
			p.EventsURL = eventsURL
		case "handler-outage-limit":
			ms := outageLimit.Milliseconds()
			p.HandlerOutageLimitMS = &ms
		case "mark-read":
			p.MarkRead = markRead
		case "retry-timeouts":
			p.RetryTimeouts = retryTimeouts
		}
	})
	if parseErr != nil {
		return parseErr
	}
	if p == (tenants.UpdateParams{}) {
		return fmt.Errorf("nothing to change; usage: %s", tenantUsage)
	}
	pool, store, err := openTenantStore(ctx, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	var t tenants.Tenant
	err = audited(ctx, env, pool, func(tx pgx.Tx) (engine.AuditEntry, error) {
		var err error
		if t, err = store.UpdateTx(ctx, tx, *slug, p); err != nil {
			return engine.AuditEntry{}, err
		}
		return engine.AuditEntry{Action: "tenant.update", Tenant: t.Slug, Details: auditDetails(updatedFields(p))}, nil
	})
	if err != nil {
		return err
	}
	return cli.PrintJSON(env.Stdout, t.Redacted())
}

// tenantPause pauses a tenant's sending, as Meta's refusals do (the admin
// page's Pause button): its conversations wait, holding no worker, until
// `ordo tenant resume`; a running batch stops after the round in flight.
func tenantPause(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo tenant pause")
	slug := fs.String("slug", "", "the tenant whose sending pauses (required)")
	reason := fs.String("reason", "paused by an operator", fmt.Sprintf("shown beside the pause and sent with tenant.sending_paused (at most %d characters)", tenants.PauseReasonMaxLength))
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := requireFlag("slug", *slug); err != nil {
		return err
	}
	paused, err := changeSending(ctx, env, func(store *tenants.Store, tx pgx.Tx) (engine.AuditEntry, bool, error) {
		paused, err := store.PauseSendingTx(ctx, tx, *slug, *reason)
		return engine.AuditEntry{Action: "tenant.pause", Tenant: *slug, Details: auditDetails(map[string]any{"reason": *reason, "was_paused": !paused})}, paused, err
	})
	if err != nil {
		return err
	}
	return cli.PrintJSON(env.Stdout, struct {
		Tenant string `json:"tenant"`
		Paused bool   `json:"paused"`
	}{*slug, paused})
}

// tenantResume lifts a tenant's sending pause (set when Meta refused its
// credential or account; fix that first) and wakes its waiting
// conversations, which go on in order.
func tenantResume(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo tenant resume")
	slug := fs.String("slug", "", "the tenant whose sending resumes (required)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := requireFlag("slug", *slug); err != nil {
		return err
	}
	resumed, err := changeSending(ctx, env, func(store *tenants.Store, tx pgx.Tx) (engine.AuditEntry, bool, error) {
		resumed, err := store.ResumeSendingTx(ctx, tx, *slug)
		return engine.AuditEntry{Action: "tenant.resume", Tenant: *slug, Details: auditDetails(map[string]bool{"was_paused": resumed})}, resumed, err
	})
	if err != nil {
		return err
	}
	return cli.PrintJSON(env.Stdout, struct {
		Tenant  string `json:"tenant"`
		Resumed bool   `json:"resumed"`
	}{*slug, resumed})
}

// changeSending runs change (a pause or a resume of a tenant's sending) in
// an audited transaction; changed is its answer.
func changeSending(ctx context.Context, env *cli.Env, change func(*tenants.Store, pgx.Tx) (engine.AuditEntry, bool, error)) (changed bool, err error) {
	pool, store, err := openTenantStore(ctx, env)
	if err != nil {
		return false, err
	}
	defer pool.Close()
	err = audited(ctx, env, pool, func(tx pgx.Tx) (engine.AuditEntry, error) {
		entry, ok, err := change(store, tx)
		changed = ok
		return entry, err
	})
	return changed, err
}

// tenantList prints one JSON line per tenant.
func tenantList(ctx context.Context, env *cli.Env, args []string) error {
	if err := cli.ParseFlags(cli.NewFlagSet(env, "ordo tenant list"), args); err != nil {
		return err
	}
	pool, store, err := openTenantStore(ctx, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	list, err := store.List(ctx)
	if err != nil {
		return err
	}
	for _, t := range list {
		if err := cli.PrintJSON(env.Stdout, t.Redacted()); err != nil {
			return err
		}
	}
	return nil
}

// updatedFields names the settings an update changes, for the audit log,
// in the admin page's words (max_attempts, handler_url, …): the values,
// except the URLs (which can carry a secret), shown as set or removed.
func updatedFields(p tenants.UpdateParams) map[string]any {
	fields := map[string]any{}
	b, _ := json.Marshal(p)
	_ = json.Unmarshal(b, &fields)
	out := map[string]any{}
	for k, v := range fields {
		if v == nil {
			continue
		}
		var snake []rune
		for i, r := range k {
			if i > 0 && unicode.IsUpper(r) && unicode.IsLower(rune(k[i-1])) {
				snake = append(snake, '_')
			}
			snake = append(snake, unicode.ToLower(r))
		}
		name := string(snake)
		if name == "handler_url" || name == "events_url" {
			v = map[bool]string{true: "set", false: "removed"}[v != ""]
		}
		out[name] = v
	}
	return out
}
