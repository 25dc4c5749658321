// Package jobs does the work: each worker process keeps Config.Workers River
// runner jobs that claim conversations from the ready set, tenant by tenant
// in weighted turns (scheduler.go), and drain them: the drain holds the
// conversation's advisory lock, fences every write, and runs each message's
// steps (call the tenant's handler, send each reply) in seq order through
// the WhatsApp channel.
//
// River hosts the workers and runs what is River-shaped: the runner jobs on
// a queue per process (river.go: refreshed while the process lives,
// removed at its stop, swept when it is gone), event deliveries, and the
// periodic jobs (maintenance.go: pruning, reconciling, event dispatch, the
// runner sweep) on the shared queue, inserted by River's leader. Which
// conversation runs next is ordo's: the ready set and the fair scheduler
// (jobs/fair), which River's queues cannot express (weights, caps across
// processes, one message at a time per conversation).
package jobs

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ordo-dev/ordo/jobs/metrics"
	"github.com/ordo-dev/ordo/jobs/outage"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/tenants"
)

// Defaults of Config's fields (a zero field takes its default).
const (
	WorkersDefault           = 50
	HandlerTimeoutDefault    = 10 * time.Minute
	SendTimeoutDefault       = 10 * time.Second
	LeaseDefault             = 30 * time.Second
	MaxMessagesPerRunDefault = 100
	MaxRunTimeDefault        = 5 * time.Second
	TurnSliceDefault         = 100 * time.Millisecond
	RetryBaseDefault         = time.Second
	RetryMaxDefault          = 5 * time.Minute
	DrainErrorDelayDefault   = time.Second
	OrphanIntervalDefault    = 30 * time.Second
	FetchPollIntervalDefault = 200 * time.Millisecond
	ReconcileWaitDefault     = 30 * time.Second
	PaceMaxSleepDefault      = 20 * time.Millisecond
	PausedRecheckDefault     = 30 * time.Second
	PairRateUnitDefault      = time.Second
	BatchSizeDefault         = 8
	// StopGraceExtra is what StopTimeout adds to the longer of HandlerTimeout
	// and SendTimeout by default: room to record the step after its call.
	StopGraceExtra        = 5 * time.Second
	WhatsAppAPIURLDefault = "https://graph.facebook.com/v23.0"
)

// Config tunes the workers. Zero values take the defaults named per field.
type Config struct {
	// Workers is how many conversations one process drains at once (its
	// runner jobs). Default WorkersDefault.
	Workers int
	// HandlerTimeout caps one call to a tenant's handler: each tenant's call
	// is bounded by its handler_timeout_ms (tenants.HandlerTimeoutDefault
	// unless changed), cut to HandlerTimeout. Default HandlerTimeoutDefault,
	// the longest handler_timeout_ms a tenant can set.
	HandlerTimeout time.Duration
	// SendTimeout bounds one request to the WhatsApp Cloud API. Default
	// SendTimeoutDefault.
	SendTimeout time.Duration
	// Lease is how long a drain's database session may stay silent before
	// Postgres ends it, releasing the conversation to another worker; a
	// stalled worker therefore loses its conversation after Lease. It must
	// exceed SendTimeout. No external call of a drain outlives the lease it
	// holds: a handler call longer than a lease lengthens the lease for
	// that call (session.callContext).
	// Default LeaseDefault.
	Lease time.Duration
	// StopTimeout bounds a graceful stop (a deploy's SIGTERM): drains finish
	// the step in flight, record it and release their conversations; what is
	// still running after StopTimeout is cancelled. Default the longer of
	// SendTimeout and the tenants' default handler timeout
	// (tenants.HandlerTimeoutDefault, or HandlerTimeout if shorter) plus
	// StopGraceExtra: about 125 s.
	StopTimeout time.Duration
	// MaxMessagesPerRun and MaxRunTime bound one drain run, after which a busy
	// conversation yields its worker and requeues itself. Defaults
	// MaxMessagesPerRunDefault, MaxRunTimeDefault.
	MaxMessagesPerRun int
	MaxRunTime        time.Duration
	// TurnSlice is how long a drain runs before it hands its worker to a
	// tenant that is waiting for one (a conversation of another tenant
	// became due while every worker was busy): after its message in flight,
	// the drain requeues its conversation and its worker claims for the
	// waiting tenant. A burst's long conversations thus delay another
	// tenant by about one slice, not by a whole conversation. Default
	// TurnSliceDefault.
	TurnSlice time.Duration
	// RetryBase and RetryMax shape a failing step's exponential backoff
	// (with jitter; a provider's Retry-After wins). Defaults RetryBaseDefault,
	// RetryMaxDefault.
	RetryBase time.Duration
	RetryMax  time.Duration
	// DrainErrorDelay is how long a conversation whose drain failed (the
	// database went away mid-run) waits before it is claimed again; a drain
	// whose worker died is claimed again when its lease is over. Default
	// DrainErrorDelayDefault.
	DrainErrorDelay time.Duration
	// OrphanInterval is how often conversations with work but no drain at
	// all (only a bug or an operator's hand makes one) are looked for (a
	// periodic job, at least PeriodMin); the look scans the conversations
	// table. Default OrphanIntervalDefault.
	OrphanInterval time.Duration
	// FetchPollInterval is how long an idle runner waits before it looks
	// for due conversations again (and River's poll, at most
	// FetchPollIntervalDefault: River runs poll-only, river.go);
	// conversations that become due are picked up at once through
	// LISTEN/NOTIFY, and the end of a wait the scheduler knows of wakes
	// it too. Default FetchPollIntervalDefault.
	FetchPollInterval time.Duration
	// RefreshMin is how often, at most, a process re-reads which tenants
	// have due conversations (scheduler.go). Default RefreshMinDefault.
	RefreshMin time.Duration
	// ReconcileWait is how long a send whose outcome is unknown waits for a
	// status webhook before it is sent again (tenant policy reconcile).
	// Default ReconcileWaitDefault.
	ReconcileWait time.Duration
	// PaceMaxSleep is how long a drain sleeps, holding its conversation and
	// its worker, for a send slot (its phone number's pacing, its user's pair
	// gap); a slot further out stays reserved and the conversation waits for
	// it in the ready set, holding nothing. Short, so that a paced tenant's
	// drains never sit on the workers other tenants need. It must be below
	// Lease. Default PaceMaxSleepDefault.
	PaceMaxSleep time.Duration
	// PausedRecheck is how long the drain of a tenant whose sending is paused
	// snoozes before looking again; resuming wakes the drains at once, so
	// this only bounds a resume done behind ordo's back. Default
	// PausedRecheckDefault.
	PausedRecheck time.Duration
	// PairRateUnit is the second of Meta's advice for pair-rate errors
	// (131056): retry after 4^X units, X counting the step's consecutive
	// pair-rate errors from 0. Default PairRateUnitDefault.
	PairRateUnit time.Duration
	// WhatsAppAPIURL is the Cloud API's base URL. Default
	// WhatsAppAPIURLDefault.
	WhatsAppAPIURL string
	// SandboxCredential, if set, is the WhatsApp credential a tenant without
	// one of its own sends with. Only `ordo dev` sets it, with WhatsAppAPIURL
	// pointing at its sandbox, so that a tenant made with `ordo tenant
	// create` sends at once. Default nil (ordo serve): such a tenant's
	// sending pauses until it has a credential.
	SandboxCredential *whatsapp.Credential
	// PruneInterval is how often the pruner removes the content of messages
	// past their tenant's retention (prune.go; a periodic job, at least
	// PeriodMin). Default PruneIntervalDefault; negative: this process never
	// schedules pruning when it is River's leader.
	PruneInterval time.Duration
	// RunnerGoneAfter is how long a worker process's runner queue may go
	// unrefreshed before the process counts as gone and a sweep deletes
	// its runner jobs and queue (river.go); a live process refreshes
	// it every RunnerGoneAfter/6 at most, and the sweep runs every
	// RunnerGoneAfter/2. Default RunnerGoneAfterDefault.
	RunnerGoneAfter time.Duration
	// PruneBatch is how many messages one pruning transaction handles.
	// Default PruneBatchDefault.
	PruneBatch int
	// BatchSize is how many quiet conversations (one queued outbound
	// message each, of an unpaced tenant: batch.go) one worker claims and
	// sends at once; they count against Workers like as many drains. 1 turns
	// batching off. Default BatchSizeDefault.
	BatchSize int
	// Metrics records step outcomes, send and handler latency, accept→send
	// latency and the drains running. Default nil: nothing recorded.
	Metrics *metrics.Metrics
	// Events tunes the delivery of tenant events (events.go); its fields
	// default one by one.
	Events EventsConfig
	// Outbound is the operator's part of the address policy every call to
	// a tenant's handler_url and events_url is dialled under (outbound.go;
	// the built-in refusals apply without it). Default none.
	Outbound tenants.OutboundPolicy
	// Database is Postgres's state as this process sees it (outage.Watch):
	// while it is unreachable every loop of the runner backs off together
	// and logs nothing but its going and its return. Shared with the web
	// layer by cmd. Default: a watch of the runner's own.
	Database *outage.Watch
	// Schema is whether the database's schema still matches this build as
	// far as this process has seen (NewSchemaWatch): after a newer build's
	// migration that no longer serves this one, every claim fails on a
	// column or function that is gone, and the runners back off and log
	// its going once, instead of a warning per claim, until the process is
	// replaced. Shared with the web layer by cmd. Default: a watch of the
	// runner's own.
	Schema *outage.Watch
}

// NewSchemaWatch is the watch of whether the database's schema matches
// this build (Config.Schema): reported to with ordosql.SchemaChanged.
func NewSchemaWatch(logger *slog.Logger) *outage.Watch {
	return outage.NewWatch("the database's schema", outage.Config{
		Gone: "no longer matches this build (a newer build migrated it?): claims and requests wait until this process is replaced",
		Back: "matches this build again",
	}, logger)
}

// PruneIntervalDefault and PruneBatchDefault are Config's pruning defaults.
const (
	PruneIntervalDefault = time.Minute
	PruneBatchDefault    = 1000
)

// River's cleaner deletes finished jobs after these (River's defaults are
// 24h, 24h and 7 days). A completed runner job is worth nothing once it
// ended; failed ones are kept for a week to be looked at.
const (
	CompletedJobRetention = time.Hour
	CancelledJobRetention = 24 * time.Hour
	DiscardedJobRetention = 7 * 24 * time.Hour
)

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Workers = cmp.Or(c.Workers, WorkersDefault)
	c.MaxMessagesPerRun = cmp.Or(c.MaxMessagesPerRun, MaxMessagesPerRunDefault)
	c.HandlerTimeout = cmp.Or(c.HandlerTimeout, HandlerTimeoutDefault)
	c.SendTimeout = cmp.Or(c.SendTimeout, SendTimeoutDefault)
	c.Lease = cmp.Or(c.Lease, LeaseDefault)
	// A deploy waits for the handler calls of tenants on the default
	// timeout, not for the longest one a tenant may set (10 min): a longer
	// call cut off by the hard stop is settled by the next drain and called
	// again with the same Idempotency-Key.
	c.StopTimeout = cmp.Or(c.StopTimeout, max(min(c.HandlerTimeout, tenants.HandlerTimeoutDefault), c.SendTimeout)+StopGraceExtra)
	c.MaxRunTime = cmp.Or(c.MaxRunTime, MaxRunTimeDefault)
	c.TurnSlice = cmp.Or(c.TurnSlice, TurnSliceDefault)
	c.RetryBase = cmp.Or(c.RetryBase, RetryBaseDefault)
	c.RetryMax = cmp.Or(c.RetryMax, RetryMaxDefault)
	c.DrainErrorDelay = cmp.Or(c.DrainErrorDelay, DrainErrorDelayDefault)
	c.RefreshMin = cmp.Or(c.RefreshMin, RefreshMinDefault)
	c.OrphanInterval = cmp.Or(c.OrphanInterval, OrphanIntervalDefault)
	c.FetchPollInterval = cmp.Or(c.FetchPollInterval, FetchPollIntervalDefault)
	c.ReconcileWait = cmp.Or(c.ReconcileWait, ReconcileWaitDefault)
	c.PaceMaxSleep = cmp.Or(c.PaceMaxSleep, PaceMaxSleepDefault)
	c.PausedRecheck = cmp.Or(c.PausedRecheck, PausedRecheckDefault)
	c.PairRateUnit = cmp.Or(c.PairRateUnit, PairRateUnitDefault)
	c.WhatsAppAPIURL = cmp.Or(c.WhatsAppAPIURL, WhatsAppAPIURLDefault)
	c.PruneInterval = cmp.Or(c.PruneInterval, PruneIntervalDefault)
	c.PruneBatch = cmp.Or(c.PruneBatch, PruneBatchDefault)
	c.RunnerGoneAfter = cmp.Or(c.RunnerGoneAfter, RunnerGoneAfterDefault)
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.Events = c.Events.WithDefaults()
	return c
}

func (c Config) validate() error {
	if c.Workers < 1 || c.MaxMessagesPerRun < 1 || c.BatchSize < 1 {
		return errors.New("jobs: Workers, MaxMessagesPerRun and BatchSize must be positive")
	}
	if c.Lease <= c.SendTimeout {
		return fmt.Errorf("jobs: Lease (%s) must exceed SendTimeout (%s)", c.Lease, c.SendTimeout)
	}
	if c.PaceMaxSleep >= c.Lease {
		return fmt.Errorf("jobs: PaceMaxSleep (%s) must be below Lease (%s)", c.PaceMaxSleep, c.Lease)
	}
	if c.RunnerGoneAfter < 2*PeriodMin {
		return fmt.Errorf("jobs: RunnerGoneAfter (%s) must be at least %s", c.RunnerGoneAfter, 2*PeriodMin)
	}
	if c.RetryBase <= 0 || c.RetryMax < c.RetryBase {
		return errors.New("jobs: RetryBase must be positive and RetryMax at least RetryBase")
	}
	return nil
}
