package web

// Failed authentication costs the attacker, not ordo: every well-formed
// wrong API key is a database lookup, and the admin password has no other
// brake. So failures are counted per client address in a fixed window; past
// Config.AuthFailureLimit in one window the address is answered 429 with
// Retry-After, before any lookup, until the window ends.
//
// Never per API key prefix: the prefix is public (the admin page and the
// audit show it), so counting on it let anyone lock a key out by sending
// wrong secrets on its prefix (issue 24: 30 guesses, the real key 429 for a
// minute). A guess on a prefix costs its sender's address, like any other;
// the secret's 128 bits are the brake on guessing it.
//
// A key that authenticated recently (goodKeyTTL, in this process) passes a
// block of its own address too (its lookup still runs, so a revoked key is
// still refused): one tenant's broken key behind a shared address (an n8n
// serving many tenants, a NAT), or a guesser at the same address, must not
// lock out every other tenant's traffic. A key not seen recently that comes
// from a blocked address waits out the window like any other: telling it
// apart would need the lookup the block exists to save.
//
// The WhatsApp webhook has no key, so its failures (posts without a valid
// signature) are counted per client address alone, in a throttle of their
// own (Config.WebhookFailureLimit per Config.WebhookFailureWindow); an
// address that sent a valid signature within goodKeyTTL passes a block, as
// a good key does, so that Meta, or a proxy every delivery comes through,
// is never locked out by a stranger at the same address (webhooks.go).
//
// Memory is bounded: at most Config.AuthThrottleEntries counters per
// throttle, the least recently failed dropped first.

import (
	"container/list"
	"crypto/sha256"
	"maps"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// recently remembers a value per key, by the key's SHA-256, for ttl after
// it was put, at most recentlyMax of them: expired entries go first, then
// any one, so the map stays bounded whatever a client sends.
type recently[V any] struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[[32]byte]recentEntry[V]
}

type recentEntry[V any] struct {
	v  V
	at time.Time
}

const recentlyMax = 10000

func (r *recently[V]) put(hash [32]byte, v V) {
	if r.ttl <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[[32]byte]recentEntry[V])
	}
	if len(r.m) >= recentlyMax {
		now := time.Now()
		maps.DeleteFunc(r.m, func(_ [32]byte, e recentEntry[V]) bool { return now.Sub(e.at) > r.ttl })
		for h := range r.m {
			if len(r.m) < recentlyMax {
				break
			}
			delete(r.m, h)
		}
	}
	r.m[hash] = recentEntry[V]{v: v, at: time.Now()}
}

func (r *recently[V]) get(hash [32]byte) (V, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[hash]
	if !ok || time.Since(e.at) > r.ttl {
		var zero V
		return zero, false
	}
	return e.v, true
}

func (r *recently[V]) forget(hash [32]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, hash)
}

// goodKeys remembers API keys that authenticated within goodKeyTTL (or
// client addresses that sent a valid webhook signature).
type goodKeys struct{ recently[struct{}] }

const goodKeyTTL = 10 * time.Minute

func newGoodKeys() goodKeys { return goodKeys{recently[struct{}]{ttl: goodKeyTTL}} }

func (g *goodKeys) add(key string) { g.put(sha256.Sum256([]byte(key)), struct{}{}) }

func (g *goodKeys) has(key string) bool {
	return key != "" && g.known(sha256.Sum256([]byte(key)))
}

// known is has for a key already hashed (an empty key is never put).
func (g *goodKeys) known(hash [32]byte) bool {
	_, ok := g.get(hash)
	return ok
}

// authThrottle counts failed authentications per key (a client address).
type authThrottle struct {
	limit  int
	window time.Duration
	max    int
	now    func() time.Time

	mu    sync.Mutex
	order *list.List // of *authFailures, most recently failed first
	byKey map[string]*list.Element
}

type authFailures struct {
	key   string
	n     int
	start time.Time // of the current window
}

func newAuthThrottle(limit int, window time.Duration, max int) *authThrottle {
	return &authThrottle{limit: limit, window: window, max: max, now: time.Now, order: list.New(), byKey: map[string]*list.Element{}}
}

// blocked returns how long the first of keys that is over the limit stays
// blocked, or 0 when none is.
func (t *authThrottle) blocked(keys ...string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for _, k := range keys {
		el, ok := t.byKey[k]
		if !ok {
			continue
		}
		f := el.Value.(*authFailures)
		if end := f.start.Add(t.window); f.n >= t.limit && now.Before(end) {
			return end.Sub(now)
		}
	}
	return 0
}

// fail counts one failed authentication against each of keys.
func (t *authThrottle) fail(keys ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for _, k := range keys {
		if k == "" {
			continue
		}
		if el, ok := t.byKey[k]; ok {
			f := el.Value.(*authFailures)
			if now.Sub(f.start) >= t.window {
				f.n, f.start = 0, now
			}
			f.n++
			t.order.MoveToFront(el)
			continue
		}
		t.byKey[k] = t.order.PushFront(&authFailures{key: k, n: 1, start: now})
		for t.order.Len() > t.max {
			oldest := t.order.Back()
			t.order.Remove(oldest)
			delete(t.byKey, oldest.Value.(*authFailures).key)
		}
	}
}

// len is how many keys are tracked (for tests of the bound).
func (t *authThrottle) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.order.Len()
}

// retryAfter renders a wait as a Retry-After header value: whole seconds,
// rounded up.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(int(math.Ceil(d.Seconds())))
}

// clientAddr is the address failed authentications and webhook signatures
// are counted against:
// the peer's, or, when the peer is a trusted proxy, the nearest untrusted
// address in X-Forwarded-For. IPv6 clients count per /64, which one host
// usually owns whole.
func (s *Server) clientAddr(r *http.Request) string {
	addr := peerAddr(r)
	if addr.IsValid() && s.trusted(addr) {
		hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				break
			}
			addr = hop.Unmap()
			if !s.trusted(addr) {
				break
			}
		}
	}
	if !addr.IsValid() {
		return r.RemoteAddr
	}
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.String()
	}
	return addr.String()
}

// peerAddr is the address of the connection's other end.
func peerAddr(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

// trusted reports whether addr is one of Config.TrustedProxies.
func (s *Server) trusted(addr netip.Addr) bool {
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// fromTrustedProxy reports whether the request came through a trusted proxy,
// whose X-Forwarded-* headers may be believed.
func (s *Server) fromTrustedProxy(r *http.Request) bool {
	a := peerAddr(r)
	return a.IsValid() && s.trusted(a)
}
