// Package jobs does the work: River runs one drain job per conversation that
// has something to do; the drain holds the conversation's advisory lock,
// fences every write, and runs each message's steps (call the tenant's
// handler, send each reply) in seq order through the WhatsApp channel.
package jobs

import (
	"errors"
	"fmt"
	"time"
)

// Config tunes the workers. Zero values take the defaults named per field.
type Config struct {
	// Workers is how many conversations one process drains at once. Default 50.
	Workers int
	// HandlerTimeout bounds one call to a tenant's handler. Default 10s.
	HandlerTimeout time.Duration
	// SendTimeout bounds one request to the WhatsApp Cloud API. Default 10s.
	SendTimeout time.Duration
	// Lease is how long a drain's database session may stay silent before
	// Postgres ends it, releasing the conversation to another worker; a
	// stalled worker therefore loses its conversation after Lease. It must
	// exceed HandlerTimeout and SendTimeout. Default 30s.
	Lease time.Duration
	// MaxMessagesPerRun and MaxRunTime bound one drain run, after which a busy
	// conversation yields its worker and requeues itself. Defaults 100, 5s.
	MaxMessagesPerRun int
	MaxRunTime        time.Duration
	// RetryBase and RetryMax shape a failing step's exponential backoff
	// (with jitter; a provider's Retry-After wins). Defaults 1s, 5m.
	RetryBase time.Duration
	RetryMax  time.Duration
	// LockBusyDelay is how long a drain that finds its conversation locked by
	// another waits before trying again. Default 1s.
	LockBusyDelay time.Duration
	// ReconcileInterval is how often stranded conversations (their drain job
	// lost with a crashed worker) are looked for. Default 2s.
	ReconcileInterval time.Duration
	// StrandedAfter is how long a running drain job may go without holding
	// its conversation's lock before it is presumed dead. Default 10s.
	StrandedAfter time.Duration
	// OrphanInterval is how often conversations with work but no drain at
	// all (only a bug or an operator's hand makes one) are looked for; the
	// look scans the conversations table. Default 30s.
	OrphanInterval time.Duration
	// FetchPollInterval is River's fallback poll; inserts are picked up at
	// once through LISTEN/NOTIFY. Default 200ms.
	FetchPollInterval time.Duration
	// ReconcileWait is how long a send whose outcome is unknown waits for a
	// status webhook before it is sent again (tenant policy reconcile).
	// Default 30s.
	ReconcileWait time.Duration
	// PaceMaxSleep is how long a drain sleeps, holding its conversation, for
	// a send slot (its phone number's pacing, its user's pair gap); a slot
	// further out stays reserved and the drain snoozes until it. It must be
	// below Lease. Default 1s.
	PaceMaxSleep time.Duration
	// PausedRecheck is how long the drain of a tenant whose sending is paused
	// snoozes before looking again; resuming wakes the drains at once, so
	// this only bounds a resume done behind ordo's back. Default 30s.
	PausedRecheck time.Duration
	// PairRateUnit is the second of Meta's advice for pair-rate errors
	// (131056): retry after 4^X units, X counting the step's consecutive
	// pair-rate errors from 0. Default 1s.
	PairRateUnit time.Duration
	// WhatsAppAPIURL is the Cloud API's base URL. Default https://graph.facebook.com/v23.0.
	WhatsAppAPIURL string
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Workers == 0 {
		c.Workers = 50
	}
	if c.MaxMessagesPerRun == 0 {
		c.MaxMessagesPerRun = 100
	}
	def(&c.HandlerTimeout, 10*time.Second)
	def(&c.SendTimeout, 10*time.Second)
	def(&c.Lease, 30*time.Second)
	def(&c.MaxRunTime, 5*time.Second)
	def(&c.RetryBase, time.Second)
	def(&c.RetryMax, 5*time.Minute)
	def(&c.LockBusyDelay, time.Second)
	def(&c.ReconcileInterval, 2*time.Second)
	def(&c.StrandedAfter, 10*time.Second)
	def(&c.OrphanInterval, 30*time.Second)
	def(&c.FetchPollInterval, 200*time.Millisecond)
	def(&c.ReconcileWait, 30*time.Second)
	def(&c.PaceMaxSleep, time.Second)
	def(&c.PausedRecheck, 30*time.Second)
	def(&c.PairRateUnit, time.Second)
	if c.WhatsAppAPIURL == "" {
		c.WhatsAppAPIURL = "https://graph.facebook.com/v23.0"
	}
	return c
}

func (c Config) validate() error {
	if c.Workers < 1 || c.MaxMessagesPerRun < 1 {
		return errors.New("jobs: Workers and MaxMessagesPerRun must be positive")
	}
	if c.Lease <= c.HandlerTimeout || c.Lease <= c.SendTimeout {
		return fmt.Errorf("jobs: Lease (%s) must exceed HandlerTimeout (%s) and SendTimeout (%s)", c.Lease, c.HandlerTimeout, c.SendTimeout)
	}
	if c.PaceMaxSleep >= c.Lease {
		return fmt.Errorf("jobs: PaceMaxSleep (%s) must be below Lease (%s)", c.PaceMaxSleep, c.Lease)
	}
	if c.RetryBase <= 0 || c.RetryMax < c.RetryBase {
		return errors.New("jobs: RetryBase must be positive and RetryMax at least RetryBase")
	}
	return nil
}
