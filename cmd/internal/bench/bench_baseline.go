package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// The baselines are what a team builds without ordo, done well: the same
// REST body over HTTP, one River job per message (River tuned as ordo tunes
// it), a River worker sending through the same WhatsApp client. river-plain
// promises nothing about order or repeats: it is the queue's ceiling.
// redis-lock adds the field's usual per-conversation lock: SET NX EX around
// the send, snooze when the conversation is taken, DEL at the end. It does
// not order (a snoozed message is overtaken by the next one), and when a
// send outlives the TTL two sends of one conversation overlap.

// baselineConfig is one baseline process.
type baselineConfig struct {
	role        string
	workers     int
	tenantsFile string
	locking     bool // redis-lock
	redisAddr   string
	redisTTL    time.Duration
	snooze      time.Duration
	ready       func(addr string)
}

// sendArgs is the baselines' River job: one message to send.
type sendArgs struct {
	Tenant       string          `json:"tenant"`
	Conversation string          `json:"conversation"`
	MessageID    string          `json:"message_id"`
	Message      json.RawMessage `json:"message"`
}

// Kind is the River job kind.
func (sendArgs) Kind() string { return "bench_send" }

// sendWorker sends one message, under the conversation's Redis lock when
// locking.
type sendWorker struct {
	river.WorkerDefaults[sendArgs]
	wa     *whatsapp.Client
	creds  map[string]whatsapp.Credential
	redis  *redis.Client // nil: river-plain
	ttl    time.Duration
	snooze time.Duration
}

func (w *sendWorker) Work(ctx context.Context, job *river.Job[sendArgs]) error {
	cred, ok := w.creds[job.Args.Tenant]
	if !ok {
		return river.JobCancel(fmt.Errorf("unknown tenant %q", job.Args.Tenant))
	}
	if w.redis != nil {
		key := "conv:" + job.Args.Tenant + ":" + job.Args.Conversation
		got, err := w.redis.SetNX(ctx, key, job.ID, w.ttl).Result()
		if err != nil {
			return fmt.Errorf("redis lock: %w", err)
		}
		if !got {
			return river.JobSnooze(w.snooze)
		}
		defer w.redis.Del(context.WithoutCancel(ctx), key)
	}
	_, err := w.wa.Send(ctx, cred, job.Args.Message, strconv.FormatInt(job.ID, 10))
	return err
}

// runBaseline serves a baseline until ctx ends.
func runBaseline(ctx context.Context, env *cli.Env, cfg baselineConfig) error {
	data, err := os.ReadFile(cfg.tenantsFile)
	if err != nil {
		return fmt.Errorf("tenants file: %w", err)
	}
	var list []baselineTenant
	if err := json.Unmarshal(data, &list); err != nil {
		return fmt.Errorf("tenants file: %w", err)
	}
	byKey := make(map[string]string, len(list))
	creds := make(map[string]whatsapp.Credential, len(list))
	for _, t := range list {
		byKey[t.Key] = t.Slug
		raw, _ := json.Marshal(t.Credential)
		var c whatsapp.Credential
		if err := json.Unmarshal(raw, &c); err != nil {
			return err
		}
		creds[t.Slug] = c
	}

	poolCfg, err := pgxpool.ParseConfig(env.DatabaseURL)
	if err != nil {
		return errors.New("parse DATABASE_URL: not a valid PostgreSQL URL")
	}
	poolCfg.MaxConns = int32(cfg.workers + 25) // as ordo serve sizes its pool
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	worker := &sendWorker{
		wa:     &whatsapp.Client{BaseURL: env.WhatsAppAPIURL, HTTP: whatsapp.NewHTTPClient(10*time.Second, cfg.workers)},
		creds:  creds,
		ttl:    cfg.redisTTL,
		snooze: cfg.snooze,
	}
	if cfg.locking {
		worker.redis = redis.NewClient(&redis.Options{Addr: cfg.redisAddr, PoolSize: cfg.workers + 10})
		defer worker.redis.Close()
		if err := worker.redis.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, worker); err != nil {
		return err
	}
	rcfg := &river.Config{
		Workers:           workers,
		FetchCooldown:     2 * time.Millisecond, // as jobs.NewRunner sets it for ordo
		FetchPollInterval: 200 * time.Millisecond,
		Logger:            env.Logger.With(slog.String("component", "river")),
	}
	if cfg.role != "api" {
		rcfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.workers}}
	}
	client, err := river.NewClient(riverpgxv5.New(pool), rcfg)
	if err != nil {
		return err
	}
	if cfg.role != "api" {
		if err := client.Start(ctx); err != nil {
			return err
		}
	}

	var srv *http.Server
	addr := ""
	if cfg.role != "worker" {
		ln, err := net.Listen("tcp", env.Addr)
		if err != nil {
			return err
		}
		srv = &http.Server{Handler: baselineIngest(client, byKey), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		addr = ln.Addr().String()
	}
	cfg.ready(addr)
	<-ctx.Done()

	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var errs []error
	if srv != nil {
		errs = append(errs, srv.Shutdown(shutdown))
	}
	if cfg.role != "api" {
		errs = append(errs, client.Stop(shutdown))
	}
	return errors.Join(errs...)
}

// baselineIngest is the baselines' POST /v1/messages: the body ordo takes,
// checked the same way, inserted as one River job.
func baselineIngest(client *river.Client[pgx.Tx], byKey map[string]string) http.Handler {
	fail := func(w http.ResponseWriter, status int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"message": msg}})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
			fail(w, http.StatusNotFound, "no such endpoint")
			return
		}
		key, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		tenant, ok := byKey[key]
		if !ok {
			fail(w, http.StatusUnauthorized, "unknown key")
			return
		}
		if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			fail(w, http.StatusUnsupportedMediaType, "Content-Type must be application/json")
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			fail(w, http.StatusRequestEntityTooLarge, "body too large")
			return
		}
		args, err := parseBaselineMessage(tenant, body)
		if err != nil {
			fail(w, http.StatusBadRequest, err.Error())
			return
		}
		res, err := client.Insert(r.Context(), args, nil)
		if err != nil {
			fail(w, http.StatusInternalServerError, "internal error")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": strconv.FormatInt(res.Job.ID, 10), "message_id": args.MessageID,
			"conversation_id": args.Conversation, "status": "queued", "duplicate": false,
		})
	})
}

// parseBaselineMessage does what ordo's REST parser does to an outbound
// message: envelope fields out, "to" defaulted, "type" required.
func parseBaselineMessage(tenant string, body []byte) (sendArgs, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return sendArgs{}, errors.New("body: must be a JSON object")
	}
	a := sendArgs{Tenant: tenant}
	if err := json.Unmarshal(fields["message_id"], &a.MessageID); err != nil || a.MessageID == "" {
		return sendArgs{}, errors.New("message_id: required")
	}
	if err := json.Unmarshal(fields["conversation_id"], &a.Conversation); err != nil || a.Conversation == "" {
		return sendArgs{}, errors.New("conversation_id: required")
	}
	if _, ok := fields["type"]; !ok {
		return sendArgs{}, errors.New("type: required")
	}
	for _, f := range []string{"message_id", "conversation_id", "direction", "payload"} {
		delete(fields, f)
	}
	if _, ok := fields["to"]; !ok {
		fields["to"], _ = json.Marshal(a.Conversation)
	}
	a.Message, _ = json.Marshal(fields)
	return a, nil
}
