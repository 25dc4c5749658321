package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
)

// ordo healthcheck exits 0 only when /readyz answers 200 on the port of
// ORDO_ADDR (the distroless image has no curl).
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	ready := make(chan int, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(<-ready)
	}))
	t.Cleanup(srv.Close)
	_, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "http://"), ":")
	for _, tc := range []struct {
		status, code int
	}{{http.StatusOK, 0}, {http.StatusServiceUnavailable, 1}} {
		ready <- tc.status
		var out bytes.Buffer
		env := &cli.Env{Addr: ":" + port, Stdout: &out, Stderr: &out, Logger: slog.New(slog.DiscardHandler)}
		if code := run(context.Background(), env, []string{"healthcheck"}); code != tc.code {
			t.Errorf("/readyz %d: exit %d, want %d; output %q", tc.status, code, tc.code, out.String())
		}
	}
	srv.Close()
	var out bytes.Buffer
	env := &cli.Env{Addr: ":" + port, Stdout: &out, Stderr: &out, Logger: slog.New(slog.DiscardHandler)}
	if code := run(context.Background(), env, []string{"healthcheck"}); code != 1 {
		t.Errorf("nothing listening: exit %d, want 1; output %q", code, out.String())
	}
}

func TestProbeURL(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		":8080":          "http://127.0.0.1:8080/readyz",
		"0.0.0.0:9000":   "http://127.0.0.1:9000/readyz",
		"[::]:9000":      "http://127.0.0.1:9000/readyz",
		"127.0.0.2:81":   "http://127.0.0.2:81/readyz",
		"[::1]:8080":     "http://[::1]:8080/readyz",
		"localhost:8080": "http://localhost:8080/readyz",
	} {
		if got, err := probeURL(addr, "/readyz"); err != nil || got != want {
			t.Errorf("probeURL(%q) = %q, %v; want %q", addr, got, err, want)
		}
	}
	if _, err := probeURL("8080", "/readyz"); err == nil {
		t.Error(`probeURL("8080"): no error, want one (no port separator)`)
	}
}
