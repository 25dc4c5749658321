package chaos

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/proc"
)

// The flood's Inject and Recover against a stand-in for the API: a real
// process whose RSS is read, and a server that refuses every post unread
// as ordo does. The record holds the RSS before and at peak, the flood's
// answers as its generator (a process of its own, this test binary run
// with FloodCommand) counted them, and the real clients' waits that
// started inside it only. As root on cgroup v1 the generator runs in a CPU
// quota, which it never exceeds, and its cgroup is gone afterwards.
func TestHostileFloodInjectRecover(t *testing.T) {
	t.Parallel()
	var posts atomic.Int64
	// The stand-in listens on 127.0.0.1, as the API does: the flood reaches
	// it from its own address.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		if host, _, _ := net.SplitHostPort(r.RemoteAddr); host != HostileSourceAddr {
			t.Errorf("flood post from %s, want %s", r.RemoteAddr, HostileSourceAddr)
		}
		if !strings.HasPrefix(r.URL.Path, "/webhooks/whatsapp/") || r.Header.Get("X-Hub-Signature-256") != "" {
			t.Errorf("flood post %s signed %q", r.URL.Path, r.Header.Get("X-Hub-Signature-256"))
		}
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	api := proc.New(proc.Config{Name: "api", Argv: []string{"sleep", "60"}, LogPath: filepath.Join(t.TempDir(), "api.log")})
	if err := api.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = api.Stop(time.Second) }()
	var out bytes.Buffer
	r := &run{cfg: Config{HostileCores: 0.25}, api: api, apiURL: srv.URL, log: &faultLog{w: &out, start: time.Now()},
		tenants: []chaosTenant{{slug: "chaos-0"}, {slug: "chaos-1"}}}
	r.latency.add(false, time.Now().Add(-time.Hour)) // long before: not the flood's

	f := &hostileFlood{s: slot{pause: 2 * time.Second}}
	if !f.Inject(context.Background(), r) {
		t.Fatalf("Inject refused:\n%s", out.String())
	}
	r.latency.add(false, time.Now())
	r.latency.add(true, time.Now())
	waitFor(t, "the flood's posts", func() bool { return posts.Load() >= 20 })
	f.Recover(context.Background(), r)

	recs := r.hostileRecords()
	if len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
	h := recs[0]
	if h.idleKB <= 0 || h.peakKB < h.idleKB || h.restarted {
		t.Errorf("RSS before %d kB, peak %d kB, restarted %t", h.idleKB, h.peakKB, h.restarted)
	}
	// A post refused unread is answered 401 or, when the answer comes
	// while the generator is still writing the body, ends with the
	// connection: which one is the network's timing.
	if h.sent == 0 || h.outcomes["401"]+h.outcomes["connection closed"] != h.sent {
		t.Errorf("flood answers %v after %d requests, %d posts seen", h.outcomes, h.sent, posts.Load())
	}
	if h.genErr != "" || h.gen.CPU <= 0 {
		t.Errorf("generator: %q, %s of CPU", h.genErr, h.gen.CPU)
	}
	if f.gen.cgroup != "" {
		// A quota is a bound the scheduler keeps whatever the load: the
		// flood's CPU is at most its budget (and a period's rounding).
		if most := time.Duration(0.25*float64(h.gen.Wall)) + 2*cfsPeriod; h.gen.CPU > most {
			t.Errorf("generator used %s of CPU in %s under a quota of 0.25 cores (%s at most)", h.gen.CPU, h.gen.Wall, most)
		}
		if _, err := os.Stat(f.gen.cgroup); !os.IsNotExist(err) {
			t.Errorf("cgroup %s left behind: %v", f.gen.cgroup, err)
		}
	} else if !strings.HasPrefix(h.budget, "nice 19") {
		t.Errorf("budget %q without a cgroup", h.budget)
	}
	t.Logf("flood: %s", h.describe())
	if len(h.rest) != 1 || len(h.webhook) != 1 {
		t.Errorf("waits during the flood: %d REST, %d webhooks; want 1 and 1", len(h.rest), len(h.webhook))
	}
	if p := h.problems(); len(p) != 0 {
		t.Errorf("a calm flood judged %q", p)
	}
	if !strings.Contains(out.String(), "fault hostile_flood:") || !strings.Contains(out.String(), "hostile flood over:") {
		t.Errorf("log:\n%s", out.String())
	}
	// The harness holds none of a body: each is made as it is read.
	n, _ := io.Copy(io.Discard, io.LimitReader(&hostileBody{left: HostileBodyBytes}, 1<<20))
	if n != 1<<20 {
		t.Errorf("read %d bytes of a flood body", n)
	}
}
