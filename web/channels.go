package web

// The webhook's tenant lookup is the first thing a stranger's request
// costs, so it is cached: slug → tenant and whatsapp credential, or "no
// such channel", for Config.ChannelCacheTTL. A credential changed by
// `ordo credential set` in another process is seen within the TTL; a
// signature that fails against a cached secret reloads it once (at most
// once per channelRefreshEvery), so a rotated app secret works at once.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/tenants"
)

// channelRefreshEvery bounds the reloads bad signatures can cause.
const channelRefreshEvery = time.Second

// channel is a tenant's WhatsApp channel as the webhook needs it; found is
// false for a slug with no tenant or no whatsapp credential.
type channel struct {
	found    bool
	tenant   tenants.Tenant
	cred     whatsapp.Credential
	loadedAt time.Time
}

// channelCache remembers channels by slug, for ttl, at most max of them.
type channelCache struct {
	ttl  time.Duration
	max  int
	load func(ctx context.Context, slug string) (channel, error)
	now  func() time.Time

	mu      sync.Mutex
	m       map[string]channel
	loading map[string]*channelLoad // one load per slug at a time
}

// channelLoad is a load in progress; its waiters read ch and err once done
// is closed.
type channelLoad struct {
	done chan struct{}
	ch   channel
	err  error
}

// channelLoadTimeout bounds one load, which runs apart from the request
// that started it: its other waiters must not fail because that one left.
const channelLoadTimeout = 5 * time.Second

func newChannelCache(ttl time.Duration, max int, load func(context.Context, string) (channel, error)) *channelCache {
	return &channelCache{ttl: ttl, max: max, load: load, now: time.Now, m: map[string]channel{}, loading: map[string]*channelLoad{}}
}

// get returns the slug's channel, from the cache while it is fresh.
func (c *channelCache) get(ctx context.Context, slug string) (channel, error) {
	c.mu.Lock()
	ch, ok := c.m[slug]
	c.mu.Unlock()
	if ok && c.now().Sub(ch.loadedAt) < c.ttl {
		return ch, nil
	}
	return c.reload(ctx, slug)
}

// refresh reloads the slug's channel if the cached one is older than
// channelRefreshEvery; ok is false when it was not reloaded.
func (c *channelCache) refresh(ctx context.Context, slug string) (channel, bool, error) {
	c.mu.Lock()
	ch, ok := c.m[slug]
	c.mu.Unlock()
	if ok && c.now().Sub(ch.loadedAt) < channelRefreshEvery {
		return ch, false, nil
	}
	ch, err := c.reload(ctx, slug)
	return ch, err == nil, err
}

// reload loads the slug's channel and caches it. Concurrent reloads of one
// slug share one load: a flood of requests for a slug is one lookup.
func (c *channelCache) reload(ctx context.Context, slug string) (channel, error) {
	c.mu.Lock()
	l, ok := c.loading[slug]
	if !ok {
		l = &channelLoad{done: make(chan struct{})}
		c.loading[slug] = l
		go c.run(slug, l)
	}
	c.mu.Unlock()
	select {
	case <-l.done:
		return l.ch, l.err
	case <-ctx.Done():
		return channel{}, ctx.Err()
	}
}

func (c *channelCache) run(slug string, l *channelLoad) {
	ctx, cancel := context.WithTimeout(context.Background(), channelLoadTimeout)
	defer cancel()
	l.ch, l.err = c.load(ctx, slug)
	l.ch.loadedAt = c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.loading, slug)
	if l.err == nil {
		if _, ok := c.m[slug]; !ok && len(c.m) >= c.max {
			c.evict()
		}
		c.m[slug] = l.ch
	}
	close(l.done)
}

// evict makes room: the stale entries go, or, if none is, an arbitrary one.
func (c *channelCache) evict() {
	now := c.now()
	for k, ch := range c.m {
		if now.Sub(ch.loadedAt) >= c.ttl {
			delete(c.m, k)
		}
	}
	for k := range c.m {
		if len(c.m) < c.max {
			return
		}
		delete(c.m, k)
	}
}

// loadChannel reads a slug's tenant and whatsapp credential.
func (s *Server) loadChannel(ctx context.Context, slug string) (channel, error) {
	t, err := s.tenants.BySlug(ctx, slug)
	if errors.Is(err, tenants.ErrNotFound) {
		return channel{}, nil
	}
	if err != nil {
		return channel{}, err
	}
	raw, err := s.vault.Get(ctx, t.ID, "whatsapp")
	if errors.Is(err, tenants.ErrNotFound) {
		return channel{}, nil
	}
	if err != nil {
		return channel{}, err
	}
	var cred whatsapp.Credential
	if err := json.Unmarshal(raw, &cred); err != nil {
		return channel{}, fmt.Errorf("decode whatsapp credential of tenant %s: %w", t.Slug, err)
	}
	return channel{found: true, tenant: t, cred: cred}, nil
}

// publicBase is the scheme and host the request came to — what Meta must
// call back: the webhook URL the admin page shows, and the media URLs a
// delivery's handler payloads carry. X-Forwarded-Proto and -Host only from a
// trusted proxy.
func (s *Server) publicBase(r *http.Request) string {
	scheme, host := "http", r.Host
	if r.TLS != nil {
		scheme = "https"
	}
	if s.fromTrustedProxy(r) {
		if p := r.Header.Get("X-Forwarded-Proto"); p == "https" || p == "http" {
			scheme = p
		}
		if h := r.Header.Get("X-Forwarded-Host"); h != "" {
			host = h
		}
	}
	return scheme + "://" + host
}
