package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/engine"
)

// lease calls the lease API with key's tenant key k.
func (e *env) lease(t *testing.T, method, path, k, body string) answer {
	t.Helper()
	return e.call(t, request{method: method, path: "/v1/leases/" + path, key: k, body: body})
}

// The life of a lease: acquire, a second acquire refused, renew, release,
// a new token greater than the last; a stale token fails check, renew and
// release; expiry frees the key; another tenant's lease on the same key is
// its own.
func TestLeaseLifecycle(t *testing.T) {
	t.Parallel()
	e := start(t, options{})
	k := e.APIKey

	a := e.lease(t, http.MethodPost, "job-1", k, `{"ttl_ms": 60000}`)
	mustStatus(t, "acquire", a, http.StatusOK)
	l1 := decode[engine.Lease](t, a)
	if l1.Key != "job-1" || l1.Token < 1 || time.Until(l1.ExpiresAt) < 50*time.Second {
		t.Fatalf("acquired %+v", l1)
	}
	mustError(t, "acquire while held", e.lease(t, http.MethodPost, "job-1", k, `{"ttl_ms": 60000}`), http.StatusConflict, "conflict")
	if c := decode[engine.LeaseCheck](t, e.lease(t, http.MethodGet, fmt.Sprintf("job-1?token=%d", l1.Token), k, "")); !c.Valid || c.ExpiresAt == nil {
		t.Errorf("check of the holder's token: %+v, want valid", c)
	}
	r := e.lease(t, http.MethodPost, "job-1/renew", k, fmt.Sprintf(`{"token": %d, "ttl_ms": 120000}`, l1.Token))
	mustStatus(t, "renew", r, http.StatusOK)
	if got := decode[engine.Lease](t, r); got.Token != l1.Token || !got.ExpiresAt.After(l1.ExpiresAt) {
		t.Errorf("renewed %+v, want token %d until after %s", got, l1.Token, l1.ExpiresAt)
	}

	// Another tenant: the same key is its own lease; A's token means nothing there.
	other := e.otherTenant(t, "globex")
	mustError(t, "B renews A's token", e.lease(t, http.MethodPost, fmt.Sprintf("job-1/renew?token=%d", l1.Token), other, `{"ttl_ms": 1000}`), http.StatusConflict, "conflict")
	mustError(t, "B releases A's token", e.lease(t, http.MethodDelete, fmt.Sprintf("job-1?token=%d", l1.Token), other, ""), http.StatusConflict, "conflict")
	if c := decode[engine.LeaseCheck](t, e.lease(t, http.MethodGet, fmt.Sprintf("job-1?token=%d", l1.Token), other, "")); c.Valid {
		t.Errorf("B's check of A's token: valid")
	}
	b := e.lease(t, http.MethodPost, "job-1", other, `{"ttl_ms": 60000}`)
	mustStatus(t, "B acquires its own job-1", b, http.StatusOK)
	if c := decode[engine.LeaseCheck](t, e.lease(t, http.MethodGet, fmt.Sprintf("job-1?token=%d", l1.Token), k, "")); !c.Valid {
		t.Errorf("A's lease was touched by B's: %+v", c)
	}

	// Release, by query and by body; a repeat of the release is answered the same.
	mustStatus(t, "release", e.lease(t, http.MethodDelete, fmt.Sprintf("job-1?token=%d", l1.Token), k, ""), http.StatusOK)
	mustStatus(t, "release again", e.lease(t, http.MethodDelete, "job-1", k, fmt.Sprintf(`{"token": %d}`, l1.Token)), http.StatusOK)
	a = e.lease(t, http.MethodPost, "job-1", k, `{"ttl_ms": 200}`)
	mustStatus(t, "acquire after release", a, http.StatusOK)
	l2 := decode[engine.Lease](t, a)
	if l2.Token <= l1.Token {
		t.Errorf("token after release %d, want greater than %d", l2.Token, l1.Token)
	}
	// The stale token fails everything.
	if c := decode[engine.LeaseCheck](t, e.lease(t, http.MethodGet, fmt.Sprintf("job-1?token=%d", l1.Token), k, "")); c.Valid {
		t.Error("the stale token checks valid")
	}
	mustError(t, "renew with the stale token", e.lease(t, http.MethodPost, "job-1/renew", k, fmt.Sprintf(`{"token": %d, "ttl_ms": 60000}`, l1.Token)), http.StatusConflict, "conflict")
	mustError(t, "release with the stale token", e.lease(t, http.MethodDelete, fmt.Sprintf("job-1?token=%d", l1.Token), k, ""), http.StatusConflict, "conflict")

	// Expiry frees the key; the expired token can no longer renew.
	e.WaitFor("the 200 ms lease to expire", 10*time.Second, func() bool {
		return !decode[engine.LeaseCheck](t, e.lease(t, http.MethodGet, fmt.Sprintf("job-1?token=%d", l2.Token), k, "")).Valid
	})
	mustError(t, "renew after expiry", e.lease(t, http.MethodPost, "job-1/renew", k, fmt.Sprintf(`{"token": %d, "ttl_ms": 60000}`, l2.Token)), http.StatusConflict, "conflict")
	a = e.lease(t, http.MethodPost, "job-1", k, `{"ttl_ms": 60000}`)
	mustStatus(t, "acquire after expiry", a, http.StatusOK)
	if l3 := decode[engine.Lease](t, a); l3.Token <= l2.Token {
		t.Errorf("token after expiry %d, want greater than %d", l3.Token, l2.Token)
	}
	// Keys are any printable text, escaped in the path.
	odd := "n8n/workflow 7:ä?#"
	mustStatus(t, "odd key", e.lease(t, http.MethodPost, url.PathEscape(odd), k, `{"ttl_ms": 1000}`), http.StatusOK)
	if n := e.Count(`SELECT count(*) FROM ordo.leases WHERE key = $1`, odd); n != 1 {
		t.Errorf("the odd key stored %d times", n)
	}
}

// Bad input and a wrong or missing key get the contract's error and store
// nothing.
func TestLeaseBadInput(t *testing.T) {
	t.Parallel()
	e := start(t, options{})
	k := e.APIKey
	a := e.lease(t, http.MethodPost, "held", k, `{"ttl_ms": 600000}`)
	mustStatus(t, "held", a, http.StatusOK)
	held := decode[engine.Lease](t, a)
	for _, c := range []struct {
		what, method, path, key, contentType, body string
		status                                     int
		code                                       string
	}{
		{"no key", http.MethodPost, "a", "", "", `{"ttl_ms": 1000}`, 401, "unauthorized"},
		{"wrong key", http.MethodPost, "a", "ordo_00000000_" + strings.Repeat("0", 32), "", `{"ttl_ms": 1000}`, 401, "unauthorized"},
		{"wrong key, huge body", http.MethodPost, "a", "garbage", "", `{"ttl_ms": 1000, "x": "` + strings.Repeat("x", 8<<10) + `"}`, 401, "unauthorized"},
		{"no ttl", http.MethodPost, "a", k, "", `{}`, 400, "invalid_request"},
		{"no body", http.MethodPost, "a", k, "", ``, 400, "invalid_request"},
		{"ttl too short", http.MethodPost, "a", k, "", `{"ttl_ms": 99}`, 400, "invalid_request"},
		{"ttl too long", http.MethodPost, "a", k, "", `{"ttl_ms": 86400001}`, 400, "invalid_request"},
		{"ttl fraction", http.MethodPost, "a", k, "", `{"ttl_ms": 1000.5}`, 400, "invalid_request"},
		{"ttl string", http.MethodPost, "a", k, "", `{"ttl_ms": "1000"}`, 400, "invalid_request"},
		{"unknown field", http.MethodPost, "a", k, "", `{"ttl": 1000}`, 400, "invalid_request"},
		{"token on acquire", http.MethodPost, "a", k, "", `{"ttl_ms": 1000, "token": 1}`, 400, "invalid_request"},
		{"not JSON", http.MethodPost, "a", k, "", `{"ttl_ms":`, 400, "invalid_request"},
		{"two objects", http.MethodPost, "a", k, "", `{"ttl_ms": 1000}{}`, 400, "invalid_request"},
		{"text/plain", http.MethodPost, "a", k, "text/plain", `{"ttl_ms": 1000}`, 415, "unsupported_media_type"},
		{"body over the limit", http.MethodPost, "a", k, "", `{"ttl_ms": 1000, "x": "` + strings.Repeat("x", 5000) + `"}`, 413, "payload_too_large"},
		{"key too long", http.MethodPost, strings.Repeat("k", 257), k, "", `{"ttl_ms": 1000}`, 400, "invalid_request"},
		{"key with a control character", http.MethodPost, "a%01b", k, "", `{"ttl_ms": 1000}`, 400, "invalid_request"},
		{"key with surrounding spaces", http.MethodPost, "%20a", k, "", `{"ttl_ms": 1000}`, 400, "invalid_request"},
		{"renew without token", http.MethodPost, "held/renew", k, "", `{"ttl_ms": 1000}`, 400, "invalid_request"},
		{"renew without ttl", http.MethodPost, "held/renew", k, "", `{"token": 1}`, 400, "invalid_request"},
		{"renew with token 0", http.MethodPost, "held/renew", k, "", `{"token": 0, "ttl_ms": 1000}`, 400, "invalid_request"},
		{"renew, tokens differ", http.MethodPost, "held/renew?token=2", k, "", `{"token": 1, "ttl_ms": 1000}`, 400, "invalid_request"},
		{"release without token", http.MethodDelete, "held", k, "", ``, 400, "invalid_request"},
		{"release with token abc", http.MethodDelete, "held?token=abc", k, "", ``, 400, "invalid_request"},
		{"release with a ttl", http.MethodDelete, "held?token=1", k, "", `{"ttl_ms": 1000}`, 400, "invalid_request"},
		{"check without token", http.MethodGet, "held", k, "", ``, 400, "invalid_request"},
		{"check with token -1", http.MethodGet, "held?token=-1", k, "", ``, 400, "invalid_request"},
		{"check with two tokens", http.MethodGet, "held?token=1&token=2", k, "", ``, 400, "invalid_request"},
		{"wrong method", http.MethodPut, "held", k, "", `{"ttl_ms": 1000}`, 405, "method_not_allowed"},
	} {
		a := e.call(t, request{method: c.method, path: "/v1/leases/" + c.path, key: c.key, contentType: c.contentType, body: c.body})
		mustError(t, c.what, a, c.status, c.code)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.leases`); n != 1 {
		t.Errorf("%d leases stored, want only the held one", n)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.leases WHERE token <> $1 OR expires_at <> $2`, held.Token, held.ExpiresAt); n != 0 {
		t.Error("a refused request changed the held lease")
	}
}

// Many clients race for one key with short leases, holding, renewing,
// releasing or letting it expire. Every token is handed out once; the
// holding time of each token (from its acquire to its release or last
// expiry, by the database's clock) ends before the next token's begins: two
// holders never both hold a valid token. At the end every token but the
// newest fails check, renew and release.
func TestLeaseConcurrentHolders(t *testing.T) {
	t.Parallel()
	e := start(t, options{})
	e.client = newClient(t, 24)
	const (
		clients = 16
		rounds  = 3 // acquisitions per client
		ttl     = 100 * time.Millisecond
	)
	type held struct {
		token      int64
		start, end time.Time
	}
	var (
		mu   sync.Mutex
		all  []held
		errs []string
	)
	fail := func(f string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(f, args...))
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, tries := 0, 0; i < rounds && tries < 2000; tries++ {
				a, err := e.send(request{method: http.MethodPost, path: "/v1/leases/hot", key: e.APIKey, body: fmt.Sprintf(`{"ttl_ms": %d}`, ttl.Milliseconds())})
				if err != nil {
					fail("acquire: %v", err)
					return
				}
				if a.status == http.StatusConflict {
					time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond) // someone holds it: try again soon
					continue
				}
				i++
				if a.status != http.StatusOK {
					fail("acquire: %s", a)
					return
				}
				var l engine.Lease
				if err := json.Unmarshal(a.body, &l); err != nil {
					fail("acquire: %v", err)
					return
				}
				h := held{token: l.Token, start: l.ExpiresAt.Add(-ttl), end: l.ExpiresAt}
				switch (c + i) % 3 {
				case 0: // renew, then release
					r, err := e.send(request{method: http.MethodPost, path: "/v1/leases/hot/renew", key: e.APIKey, body: fmt.Sprintf(`{"token": %d, "ttl_ms": %d}`, l.Token, ttl.Milliseconds())})
					if err == nil && r.status == http.StatusOK {
						var rl engine.Lease
						_ = json.Unmarshal(r.body, &rl)
						h.end = rl.ExpiresAt
					}
					fallthrough
				case 1: // release
					r, err := e.send(request{method: http.MethodDelete, path: fmt.Sprintf("/v1/leases/hot?token=%d", l.Token), key: e.APIKey})
					if err == nil && r.status == http.StatusOK {
						var rl engine.Lease
						_ = json.Unmarshal(r.body, &rl)
						h.end = rl.ExpiresAt
					}
				case 2: // let it expire
				}
				mu.Lock()
				all = append(all, h)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d client errors, first: %s", len(errs), errs[0])
	}
	slices.SortFunc(all, func(a, b held) int { return int(a.token - b.token) })
	if len(all) < clients*rounds/2 {
		t.Fatalf("only %d acquisitions in %d tries", len(all), clients*rounds)
	}
	for i := 1; i < len(all); i++ {
		prev, cur := all[i-1], all[i]
		if cur.token == prev.token {
			t.Fatalf("token %d handed out twice", cur.token)
		}
		if cur.start.Before(prev.end) {
			t.Errorf("token %d held from %s, before token %d's lease ended at %s: two holders at once",
				cur.token, cur.start.Format(time.StampMicro), prev.token, prev.end.Format(time.StampMicro))
		}
	}
	t.Logf("%d acquisitions by %d clients", len(all), clients)
	newest := all[len(all)-1].token
	for _, h := range all[:len(all)-1] {
		if c := decode[engine.LeaseCheck](t, e.lease(t, http.MethodGet, fmt.Sprintf("hot?token=%d", h.token), e.APIKey, "")); c.Valid {
			t.Errorf("stale token %d checks valid (newest %d)", h.token, newest)
		}
	}
	stale := all[0].token
	mustError(t, "renew a stale token", e.lease(t, http.MethodPost, "hot/renew", e.APIKey, fmt.Sprintf(`{"token": %d, "ttl_ms": 1000}`, stale)), http.StatusConflict, "conflict")
	mustError(t, "release a stale token", e.lease(t, http.MethodDelete, fmt.Sprintf("hot?token=%d", stale), e.APIKey, ""), http.StatusConflict, "conflict")
}

// Two acquirers of an expired key queue on its row (held here by a
// transaction of the test's, so both are waiting when it lets go): exactly
// one gets the next token, the other is told the key is held.
func TestLeaseAcquireRaceOnExpiredKey(t *testing.T) {
	t.Parallel()
	e := start(t, options{})
	ctx := context.Background()
	if _, err := e.Pool.Exec(ctx, `INSERT INTO ordo.leases (tenant_id, key, token, expires_at) VALUES ($1, 'k', 7, now() - interval '1 second')`, e.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	tx, err := e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SELECT 1 FROM ordo.leases WHERE key = 'k' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			a, _ := e.send(request{method: http.MethodPost, path: "/v1/leases/k", key: e.APIKey, body: `{"ttl_ms": 60000}`})
			answers <- a
		}()
	}
	e.WaitFor("both acquirers waiting on the lease row", 20*time.Second, func() bool {
		return e.Count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO ordo.leases%'`) == 2
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a, b := <-answers, <-answers
	if a.status == http.StatusConflict {
		a, b = b, a
	}
	mustStatus(t, "the winner", a, http.StatusOK)
	mustError(t, "the other", b, http.StatusConflict, "conflict")
	if l := decode[engine.Lease](t, a); l.Token != 8 {
		t.Errorf("token %d, want 8 (the expired 7 plus one)", l.Token)
	}
}
