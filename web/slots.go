package web

// Slots for webhook bodies nobody has vouched for yet (webhooks.go), shared
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

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
)

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
