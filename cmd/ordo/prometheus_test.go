package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/cmd/internal/proc"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
	"github.com/ordo-dev/ordo/sql/sqltest"
	"github.com/ordo-dev/ordo/tenants"
)

// runAsOrdo, set in a child's environment, makes this test binary run as
// `ordo` itself: the processes of the tests below are real ordo processes
// (the product's main) without a build step.
const runAsOrdo = "ORDO_TEST_RUN_AS_ORDO"

func TestMain(m *testing.M) {
	if os.Getenv(runAsOrdo) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// needTools finds the named binaries, or skips the test outside CI (CI's
// .ci/run installs them: a missing one there is a failure).
func needTools(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed (.ci/run installs Debian's prometheus package)", n)
			}
			t.Skipf("%s is not installed: apt-get install prometheus (CI installs it)", n)
		}
	}
}

// freePort returns a loopback address nobody listens on right now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startOrdo starts `ordo serve ARGS…` as a child process on addr.
func startOrdo(t *testing.T, name, addr string, env []string, args ...string) *proc.Proc {
	t.Helper()
	p := proc.New(proc.Config{
		Name:    name,
		Argv:    append([]string{os.Args[0], "serve", "--addr", addr}, args...),
		Env:     append(append(os.Environ(), runAsOrdo+"=1", "ORDO_LOG_LEVEL=warn"), env...),
		LogPath: filepath.Join(t.TempDir(), name+".log"),
	})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(30 * time.Second); err != nil {
			t.Errorf("%s: %v%s", name, err, p.LogTail())
		}
	})
	return p
}

// waitGet GETs url until it answers 200 or the deadline passes.
func waitGet(t *testing.T, p *proc.Proc, url string, limit time.Duration) []byte {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return body
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no 200 within %s (last error %v)%s", url, limit, err, p.LogTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A real Prometheus (Debian's) scrapes an API process and two worker
// processes (real ordo processes) until every target is up, and promtool
// finds nothing wrong in any of their expositions.
func TestPrometheusScrapesEveryRole(t *testing.T) {
	needTools(t, "prometheus", "promtool")
	t.Parallel()
	dbURL := sqltest.URL(t)
	key, err := tenants.GenerateMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	wa := whatsapptest.NewServer()
	t.Cleanup(wa.Close)
	env := []string{"DATABASE_URL=" + dbURL, "ORDO_MASTER_KEYS=" + key.Format(), "ORDO_WHATSAPP_API_URL=" + wa.URL()}

	// A tenant with a credential, through the operator commands.
	var out bytes.Buffer
	cliEnv := &cli.Env{DatabaseURL: dbURL, MasterKeys: key.Format(), Stdout: &out, Stderr: &out, Logger: slog.New(slog.DiscardHandler)}
	if code := run(context.Background(), cliEnv, []string{"tenant", "create", "--slug", "acme"}); code != 0 {
		t.Fatalf("tenant create: exit %d: %s", code, out.String())
	}
	var created struct {
		APIKey string `json:"api_key"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &created); err != nil {
		t.Fatalf("tenant create printed %q: %v", out.String(), err)
	}
	credFile := filepath.Join(t.TempDir(), "cred.json")
	cred := `{"phone_number_id":"1000001","access_token":"token","app_secret":"secret","verify_token":"verify"}`
	if err := os.WriteFile(credFile, []byte(cred), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := run(context.Background(), cliEnv, []string{"credential", "set", "--tenant", "acme", "--name", "whatsapp", "--from-file", credFile}); code != 0 {
		t.Fatalf("credential set: exit %d: %s", code, out.String())
	}

	addrs := []string{freePort(t), freePort(t), freePort(t)}
	procs := []*proc.Proc{
		startOrdo(t, "api", addrs[0], env, "--role", "api"),
		startOrdo(t, "worker-1", addrs[1], env, "--role", "worker", "--workers", "2"),
		startOrdo(t, "worker-2", addrs[2], env, "--role", "worker", "--workers", "2"),
	}
	for i, a := range addrs {
		waitGet(t, procs[i], "http://"+a+"/readyz", time.Minute)
	}

	// One message through the API and a worker, so that the counters and
	// histograms have samples.
	if resp := postHello(t, "http://"+addrs[0], created.APIKey, "m-1"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /v1/messages: %s", resp.Status)
	}
	deadline := time.Now().Add(time.Minute)
	for len(wa.Sends()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the message was not sent within a minute%s%s", procs[1].LogTail(), procs[2].LogTail())
		}
		time.Sleep(50 * time.Millisecond)
	}

	promAddr := startPrometheus(t, addrs)
	waitAllUp(t, promAddr, addrs, time.Minute)

	// Each exposition passes promtool and says what it should.
	for i, a := range addrs {
		body := waitGet(t, procs[i], "http://"+a+"/metrics", 10*time.Second)
		check := exec.Command("promtool", "check", "metrics")
		check.Stdin = bytes.NewReader(body)
		if out, err := check.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics on %s (%s): %v\n%s", procs[i].Name(), a, err, out)
		}
		want := []string{"ordo_build_info{", "ordo_db_pool_max_conns ", "go_goroutines ", "ordo_stats_up 1", "ordo_sending_paused_tenants 0"}
		if i == 0 {
			want = append(want, `ordo_messages_accepted_total{direction="outbound",source="rest"} 1`,
				`ordo_http_requests_total{code="202",method="POST",route="/v1/messages"} 1`)
		}
		for _, w := range want {
			if !bytes.Contains(body, []byte(w)) {
				t.Errorf("%s's /metrics has no %q", procs[i].Name(), w)
			}
		}
	}
	// The send happened on one of the workers: its step and latencies.
	var sent bool
	for i := 1; i < 3; i++ {
		body := waitGet(t, procs[i], "http://"+addrs[i]+"/metrics", 10*time.Second)
		sent = sent || bytes.Contains(body, []byte(`ordo_steps_total{kind="send",outcome="done"} 1`)) &&
			bytes.Contains(body, []byte(`ordo_accept_to_send_seconds_count 1`)) &&
			bytes.Contains(body, []byte(`ordo_send_duration_seconds_count{result="ok"} 1`))
	}
	if !sent {
		t.Error("neither worker exports the send: ordo_steps_total{kind=\"send\",outcome=\"done\"}, ordo_accept_to_send_seconds, ordo_send_duration_seconds")
	}
}

// startPrometheus runs Debian's prometheus scraping targets every second
// and returns its address.
func startPrometheus(t *testing.T, targets []string) string {
	t.Helper()
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, a := range targets {
		quoted[i] = "'" + a + "'"
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: ordo
    static_configs:
      - targets: [%s]
`, strings.Join(quoted, ", "))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	check := exec.Command("promtool", "check", "config", cfgPath)
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
	addr := freePort(t)
	p := proc.New(proc.Config{
		Name: "prometheus",
		Argv: []string{"prometheus", "--config.file=" + cfgPath, "--storage.tsdb.path=" + filepath.Join(dir, "data"),
			"--web.listen-address=" + addr},
		LogPath: filepath.Join(dir, "prometheus.log"),
	})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(10 * time.Second) })
	waitGet(t, p, "http://"+addr+"/-/ready", time.Minute)
	return addr
}

// waitAllUp asks Prometheus's HTTP API for up until every target has
// up == 1.
func waitAllUp(t *testing.T, promAddr string, targets []string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	var last string
	for {
		up := map[string]string{}
		resp, err := http.Get("http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(`up{job="ordo"}`))
		if err == nil {
			var r struct {
				Status string `json:"status"`
				Data   struct {
					Result []struct {
						Metric map[string]string `json:"metric"`
						Value  []any             `json:"value"`
					} `json:"result"`
				} `json:"data"`
			}
			err = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			for _, s := range r.Data.Result {
				if len(s.Value) == 2 {
					up[s.Metric["instance"]] = fmt.Sprint(s.Value[1])
				}
			}
		}
		all := true
		for _, a := range targets {
			all = all && up[a] == "1"
		}
		if all {
			return
		}
		last = fmt.Sprintf("up = %v (error %v)", up, err)
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus did not see every target up within %s: %s", limit, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
