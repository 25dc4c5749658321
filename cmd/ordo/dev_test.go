package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/pgcluster"
	"github.com/ordo-dev/ordo/cmd/internal/proc"
)

// devProcessEnv is this process's environment for an `ordo dev` child:
// what the test run sets for itself (its throwaway database, keys, Cloud
// API) removed, so the child starts its own cluster as a user's would.
func devProcessEnv(addr string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "DATABASE_URL", "ORDO_MASTER_KEYS", "ORDO_WHATSAPP_API_URL", "ORDO_ADMIN_PASSWORD", "ORDO_ADDR":
			continue
		}
		env = append(env, kv)
	}
	return append(env, runAsOrdo+"=1", "ORDO_ADDR="+addr, "ORDO_LOG_LEVEL=info")
}

// ordoIn runs `ordo ARGS…` as a process in dir and returns its exit code
// and output.
func ordoIn(t *testing.T, dir string, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("ordo %s: %v", strings.Join(args, " "), err)
	}
	return code, string(out)
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

// A newcomer's first minutes, as real processes in a fresh directory:
// `ordo dev` starts its own Postgres; a second `ordo dev` in the same
// directory refuses, naming the first, and leaves it alone (its Postgres
// keeps running, its log stays quiet); a tenant made with `ordo tenant
// create`, which has no WhatsApp credential, sends to the sandbox at once,
// marked so, and its sending is not paused.
func TestDevSecondRefusedAndNewTenantSendsToSandbox(t *testing.T) {
	t.Parallel()
	if _, err := pgcluster.FindBinaries(); err != nil {
		t.Skipf("ordo dev needs the PostgreSQL server binaries: %v", err)
	}
	dir := t.TempDir()
	// The cluster lives in dir/.ordo/pg; as root it belongs to postgres,
	// which must be able to enter dir.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pgcluster.StopLeftover(filepath.Join(dir, ".ordo", "pg")) })
	addr := freePort(t)
	base := "http://" + addr
	env := devProcessEnv(addr)
	logPath := filepath.Join(t.TempDir(), "dev.log")
	first := proc.New(proc.Config{Name: "ordo dev", Argv: []string{os.Args[0], "dev"}, Env: env, Dir: dir, LogPath: logPath})
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := first.Stop(60 * time.Second); err != nil {
			t.Errorf("first ordo dev: %v%s", err, first.LogTail())
		}
	})
	waitGet(t, first, base+"/readyz", 3*time.Minute)

	before := countLines(t, logPath)
	code, out := ordoIn(t, dir, env, "dev")
	want := "already running: pid " + strconv.Itoa(first.Pid()) + ", address http://127.0.0.1:"
	if code == 0 || !strings.Contains(out, want) {
		t.Fatalf("second ordo dev: exit %d, output:\n%s\nwant non-zero and %q", code, out, want)
	}
	time.Sleep(2 * time.Second) // a Postgres stopped under the first would show by now
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatalf("first ordo dev after the second exited: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first ordo dev's /readyz: %d after the second exited%s", resp.StatusCode, first.LogTail())
	}
	if grown := countLines(t, logPath) - before; grown >= 10 {
		t.Fatalf("first ordo dev's log grew by %d lines while the second came and went%s", grown, first.LogTail())
	}

	// A tenant as the README makes it: no credential.
	code, out = ordoIn(t, dir, env, "tenant", "create", "--slug", "t2")
	if code != 0 {
		t.Fatalf("tenant create: exit %d: %s", code, out)
	}
	var created struct {
		APIKey string `json:"api_key"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &created); err != nil || created.APIKey == "" {
		t.Fatalf("tenant create printed %q: %v", out, err)
	}
	api := func(method, path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+created.APIKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.Bytes()
	}
	if code, body := api("POST", "/v1/messages", `{"message_id":"t2-1","conversation_id":"16505550002","type":"text","text":{"body":"hi"}}`); code != http.StatusAccepted {
		t.Fatalf("POST /v1/messages: %d %s", code, body)
	}
	var msg struct {
		Status string `json:"status"`
		Steps  []struct {
			Status    string `json:"status"`
			Sandbox   bool   `json:"sandbox"`
			LastError string `json:"last_error"`
		} `json:"steps"`
	}
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := api("GET", "/v1/messages/t2-1", "")
		if code != http.StatusOK || json.Unmarshal(body, &msg) != nil {
			t.Fatalf("GET /v1/messages/t2-1: %d %s", code, body)
		}
		if msg.Status == "done" || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if msg.Status != "done" || len(msg.Steps) != 1 || !msg.Steps[0].Sandbox {
		t.Fatalf("t2's message: %+v; want done, its send marked sandbox%s", msg, first.LogTail())
	}
	code, out = ordoIn(t, dir, env, "tenant", "list")
	if code != 0 || !strings.Contains(out, `"slug":"t2"`) || strings.Contains(out, "sending_paused") {
		t.Fatalf("tenant list: exit %d:\n%s\nwant t2 not paused", code, out)
	}
}
