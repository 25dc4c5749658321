package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
)

// HealthcheckTimeoutDefault bounds `ordo healthcheck`'s request.
const HealthcheckTimeoutDefault = 3 * time.Second

// runHealthcheck is `ordo healthcheck [--addr A] [--path P]`: GET
// http://127.0.0.1:<port of ORDO_ADDR>/readyz, exit 0 on 200 and 1 otherwise.
// The image is distroless (no shell, no curl): compose.yaml's healthcheck
// runs this. Any role answers /readyz, a worker on its small listener.
func runHealthcheck(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo healthcheck")
	addr := fs.String("addr", "", "the address ordo serve listens on (default $ORDO_ADDR, else "+DefaultAddr+")")
	path := fs.String("path", "/readyz", "what to GET: /readyz (database reachable and migrated) or /healthz (process up)")
	timeout := fs.Duration("timeout", HealthcheckTimeoutDefault, "bound on the request")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	url, err := probeURL(cmp.Or(*addr, env.Addr, DefaultAddr), *path)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	fmt.Fprintf(env.Stdout, "ok: GET %s: %s\n", url, resp.Status)
	return nil
}

// probeURL is the URL of path on a listen address: a wildcard or empty host
// (":8080", "0.0.0.0:8080", "[::]:8080") is probed on 127.0.0.1, a
// specific one as it is.
func probeURL(addr, path string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}
