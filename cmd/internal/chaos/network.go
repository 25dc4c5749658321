package chaos

import (
	"net/url"
	"sort"
	"time"
)

// network is the run's proxies (netproxy.go): one to Postgres per ordo
// process, one to the fake Cloud API per worker. Without them (an HA run,
// whose DATABASE_URL names several hosts) the processes connect directly
// and the partition faults are not planned.
type network struct {
	db    map[string]*chaosProxy // process name → its proxy to Postgres
	sends map[string]*chaosProxy // worker name → its proxy to the Cloud API
}

// procDBURL is the DATABASE_URL of process name: through its own proxy.
func (r *run) procDBURL(name string) string {
	if r.cluster == nil {
		return r.dbURL
	}
	r.netMu.Lock()
	defer r.netMu.Unlock()
	if p := r.net.db[name]; p != nil {
		return r.viaProxy(r.dbURL, p)
	}
	u, err := url.Parse(r.dbURL)
	if err != nil {
		return r.dbURL
	}
	p, err := newChaosProxy(name+"→postgres", u.Host, r.cfg.Seed, false)
	if err != nil {
		r.log.printf("no proxy to Postgres for %s (%v): it connects directly", name, err)
		return r.dbURL
	}
	if r.net.db == nil {
		r.net.db = make(map[string]*chaosProxy)
	}
	r.net.db[name] = p
	return r.viaProxy(r.dbURL, p)
}

func (r *run) viaProxy(raw string, p *chaosProxy) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Host = p.Addr()
	return u.String()
}

// procProviderURL is ORDO_WHATSAPP_API_URL for a worker, through its own
// proxy, which records its sends; "" for another process (it keeps the
// run's).
func (r *run) procProviderURL(name string) string {
	if r.cluster == nil || len(name) < 7 || name[:7] != "worker-" {
		return ""
	}
	r.netMu.Lock()
	defer r.netMu.Unlock()
	p := r.net.sends[name]
	if p == nil {
		u, err := url.Parse(r.provider.URL())
		if err != nil {
			return ""
		}
		if p, err = newChaosProxy(name+"→cloud-api", u.Host, r.cfg.Seed, true); err != nil {
			r.log.printf("no proxy to the Cloud API for %s (%v): it connects directly", name, err)
			return ""
		}
		if r.net.sends == nil {
			r.net.sends = make(map[string]*chaosProxy)
		}
		r.net.sends[name] = p
	}
	return "http://" + p.Addr() + "/v23.0"
}

// dbProxies lists the proxies to Postgres, by process name.
func (r *run) dbProxies() []*chaosProxy {
	r.netMu.Lock()
	defer r.netMu.Unlock()
	names := make([]string, 0, len(r.net.db))
	for n := range r.net.db {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]*chaosProxy, 0, len(names))
	for _, n := range names {
		out = append(out, r.net.db[n])
	}
	return out
}

func (r *run) dbProxy(name string) *chaosProxy {
	r.netMu.Lock()
	defer r.netMu.Unlock()
	return r.net.db[name]
}

func (r *run) sendProxy(name string) *chaosProxy {
	r.netMu.Lock()
	defer r.netMu.Unlock()
	return r.net.sends[name]
}

// workerSends returns, per worker, when it sent each chunk to the Cloud API.
func (r *run) workerSends() map[string][]time.Time {
	r.netMu.Lock()
	defer r.netMu.Unlock()
	out := make(map[string][]time.Time, len(r.net.sends))
	for n, p := range r.net.sends {
		out[n] = p.Sent()
	}
	return out
}

// closeProxies ends every proxy; safe to call twice.
func (r *run) closeProxies() {
	r.netMu.Lock()
	defer r.netMu.Unlock()
	for _, p := range r.net.db {
		p.Close()
	}
	for _, p := range r.net.sends {
		p.Close()
	}
}
