//go:build n8ne2e

// Package n8ne2e is `make n8n-e2e`: ordo's n8n templates (web/n8n) run on a
// real n8n against a fresh `ordo dev`, the way a user sets them up. It is a
// test behind the n8ne2e build tag: it needs Node.js and n8n (installed on
// first use into a cache outside the repository, reused after).
package n8ne2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/proc"
)

// N8NVersion is the n8n the e2e runs: the 1.123 line is the last that runs
// on Node 20 (2.x needs Node 24).
const N8NVersion = "1.123.81"

// n8nPackageJSON pins n8n and overrides two of its dependencies: xlsx,
// which n8n takes from a CDN outside the npm registry, and isolated-vm,
// whose 6.x needs Node 22.
const n8nPackageJSON = `{
  "name": "ordo-n8n-e2e-cache",
  "private": true,
  "dependencies": { "n8n": "` + N8NVersion + `" },
  "overrides": { "xlsx": "0.18.5", "isolated-vm": "5.0.4" }
}
`

// n8nDir is where n8n is installed: $ORDO_N8N_DIR, else the user's cache.
func n8nDir() string {
	if d := os.Getenv("ORDO_N8N_DIR"); d != "" {
		return d
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "ordo", "n8n-"+N8NVersion)
}

// ensureN8N installs n8n into n8nDir unless it is there (about 8 minutes
// and 1.8 GB the first time) and returns its binary.
func ensureN8N(t *testing.T) string {
	t.Helper()
	dir := n8nDir()
	bin := filepath.Join(dir, "node_modules", ".bin", "n8n")
	if out, err := exec.Command(bin, "--version").Output(); err == nil && strings.TrimSpace(string(out)) == N8NVersion {
		return bin
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatalf("n8n needs Node.js and npm: %v", err)
	}
	t.Logf("installing n8n %s into %s (once; about 8 minutes) …", N8NVersion, dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(n8nPackageJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install n8n: %v\n%s", err, out)
	}
	return bin
}

// n8nProc is one n8n instance with a user folder of its own.
type n8nProc struct {
	t    *testing.T
	bin  string
	home string
	port int
	p    *proc.Proc
}

func newN8N(t *testing.T, bin, home string) *n8nProc {
	return &n8nProc{t: t, bin: bin, home: home, port: freePort(t)}
}

// env is n8n's environment: loopback only, no telemetry, no banners, and
// nothing that reaches outside this machine.
func (n *n8nProc) env() []string {
	return append(os.Environ(),
		"N8N_USER_FOLDER="+n.home,
		"N8N_PORT="+strconv.Itoa(n.port),
		"N8N_LISTEN_ADDRESS=127.0.0.1",
		"N8N_DIAGNOSTICS_ENABLED=false",
		"N8N_VERSION_NOTIFICATIONS_ENABLED=false",
		"N8N_PERSONALIZATION_ENABLED=false",
		"N8N_TEMPLATES_ENABLED=false",
		"N8N_SECURE_COOKIE=false",
		"N8N_ENFORCE_SETTINGS_FILE_PERMISSIONS=false",
		"N8N_RUNNERS_ENABLED=false",
		"N8N_LOG_LEVEL=info",
		"EXTERNAL_FRONTEND_HOOKS_URLS=",
		"N8N_HIRING_BANNER_ENABLED=false",
	)
}

// cli runs an n8n command (import:…, update:…) while n8n is not running.
func (n *n8nProc) cli(args ...string) {
	n.t.Helper()
	cmd := exec.Command(n.bin, args...)
	cmd.Env = n.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		n.t.Fatalf("n8n %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// start starts n8n and waits until the webhook at probePath is registered
// (n8n answers /healthz before it registered its workflows' webhooks).
func (n *n8nProc) start(probePath string) {
	n.t.Helper()
	if n.p == nil {
		n.p = proc.New(proc.Config{Name: "n8n", Argv: []string{n.bin, "start"}, Env: n.env(),
			LogPath: filepath.Join(n.home, "n8n.log")})
	}
	if err := n.p.Start(); err != nil {
		n.t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		resp, err := http.Post(n.url()+"/webhook/"+probePath, "application/json", strings.NewReader("{}"))
		if err == nil {
			resp.Body.Close()
			// 404 is "not registered" (yet); anything else (403 for a
			// Header Auth webhook without the header) means it is.
			if resp.StatusCode != http.StatusNotFound {
				return
			}
		}
		select {
		case <-n.p.Done():
			n.t.Fatalf("n8n exited: %v%s", n.p.Err(), n.p.LogTail())
		case <-time.After(time.Second):
		}
	}
	n.t.Fatalf("n8n did not register its webhooks within 3 minutes%s", n.p.LogTail())
}

// stop stops n8n as a deploy or an edit would (SIGTERM).
func (n *n8nProc) stop() {
	if n.p != nil {
		_ = n.p.Stop(30 * time.Second)
		n.p = nil
	}
}

func (n *n8nProc) url() string { return "http://127.0.0.1:" + strconv.Itoa(n.port) }

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitFor polls cond every half second until it holds or d passes.
func waitFor(ctx context.Context, d time.Duration, cond func() (bool, string)) error {
	deadline := time.Now().Add(d)
	last := ""
	for {
		ok, state := cond()
		if ok {
			return nil
		}
		last = state
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not within %s: %s", d, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
