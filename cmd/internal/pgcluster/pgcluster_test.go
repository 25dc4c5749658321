package pgcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// startFast starts a throwaway cluster in dir and stops it when the test ends.
func startFast(t *testing.T, dir string, settings map[string]string) *Cluster {
	t.Helper()
	c, err := Start(t.Context(), Config{Dir: dir, Fast: true, Settings: settings})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("Stop at cleanup: %v", err)
		}
	})
	return c
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func queryInt(t *testing.T, url, query string) int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(t.Context(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// TestLifecycle walks a cluster through what ordo dev and the chaos suite do
// with one: start, stop, start again on the same data, crash-restart.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	c := startFast(t, dir, nil)

	if got := queryInt(t, c.URL("postgres"), "SELECT 1"); got != 1 {
		t.Fatalf("SELECT 1 = %d", got)
	}
	if !strings.HasPrefix(c.URL("app"), "postgres://postgres@127.0.0.1:") || !strings.HasSuffix(c.URL("app"), "/app?sslmode=disable") {
		t.Errorf("URL(app) = %s", c.URL("app"))
	}
	conn := connect(t, c.URL("postgres"))
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatalf("create table: %v", err)
	}
	conn.Close(ctx)

	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Errorf("second Stop (already stopped): %v", err)
	}
	if _, err := pgx.Connect(ctx, c.URL("postgres")); err == nil {
		t.Fatal("connected after Stop")
	}

	again, err := Start(ctx, Config{Dir: dir, Fast: true})
	if err != nil {
		t.Fatalf("Start again on the same Dir: %v", err)
	}
	if again.Port != c.Port {
		t.Errorf("second Start on port %d, first on %d: the recorded port should be reused", again.Port, c.Port)
	}
	if got := queryInt(t, again.URL("postgres"), "SELECT v FROM kept"); got != 42 {
		t.Errorf("row after Stop and Start = %d, want 42", got)
	}

	if err := again.Restart(ctx, true); err != nil {
		t.Fatalf("Restart(immediate): %v", err)
	}
	if got := queryInt(t, again.URL("postgres"), "SELECT v FROM kept"); got != 42 {
		t.Errorf("row after an immediate restart = %d, want 42", got)
	}
	if err := again.Restart(ctx, false); err != nil {
		t.Fatalf("Restart(fast): %v", err)
	}
	if got := queryInt(t, again.URL("postgres"), "SELECT 1"); got != 1 {
		t.Errorf("SELECT 1 after a fast restart = %d", got)
	}
}

// TestStartReusesRunning checks that Start on a running cluster's Dir returns
// that cluster rather than failing or starting a second server.
func TestStartReusesRunning(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := startFast(t, dir, nil)
	conn := connect(t, c.URL("postgres"))
	var pid int
	if err := conn.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}

	again, err := Start(t.Context(), Config{Dir: dir, Fast: true, Port: c.Port + 1})
	if err != nil {
		t.Fatalf("Start on a running cluster: %v", err)
	}
	if again.Port != c.Port {
		t.Errorf("reused cluster on port %d, running one on %d", again.Port, c.Port)
	}
	// The first session survives: the server was not restarted.
	if err := conn.Ping(t.Context()); err != nil {
		t.Errorf("session of the first Start broken by the second: %v", err)
	}
}

// TestFreshCluster starts a cluster in a directory Start has to create,
// below a temporary directory that (when run as root) the postgres account
// cannot enter until Start lets it, and checks the settings it runs with and
// CreateDatabase.
func TestFreshCluster(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a", "b", "cluster")
	c := startFast(t, dir, map[string]string{"max_connections": "500", "cluster_name": "it's ordo"})
	conn := connect(t, c.URL("postgres"))
	for name, want := range map[string]string{
		"max_connections":    "500",
		"shared_buffers":     "256MB",
		"fsync":              "off",
		"synchronous_commit": "off",
		"full_page_writes":   "off",
		"listen_addresses":   "127.0.0.1",
		"server_encoding":    "UTF8",
		"lc_collate":         "C",
		"cluster_name":       "it's ordo", // quoted in the config file
	} {
		var got string
		if err := conn.QueryRow(t.Context(), "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatalf("current_setting(%s): %v", name, err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}

	for range 2 { // the second call finds it and does nothing
		if err := c.CreateDatabase(t.Context(), "Ordo-Dev"); err != nil {
			t.Fatalf("CreateDatabase: %v", err)
		}
	}
	if got := queryInt(t, c.URL("Ordo-Dev"), "SELECT 7"); got != 7 {
		t.Errorf("query on the new database = %d", got)
	}
}

// TestDurableByDefault checks that a cluster without Fast keeps the server's
// durability settings.
func TestDurableByDefault(t *testing.T) {
	t.Parallel()
	c, err := Start(t.Context(), Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	conn := connect(t, c.URL("postgres"))
	for _, name := range []string{"fsync", "synchronous_commit", "full_page_writes"} {
		var got string
		if err := conn.QueryRow(t.Context(), "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != "on" {
			t.Errorf("%s = %s, want on", name, got)
		}
	}
}

func TestUnreachableDir(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("only root hands the cluster to another account")
	}
	o, err := lookupOwner()
	if err != nil {
		t.Fatal(err)
	}
	locked := t.TempDir()
	if err := os.Chmod(locked, 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(locked, "cluster")
	// Pretend the temporary root is elsewhere: locked is then a directory
	// Start neither made nor may loosen.
	err = o.ensureReachable(dir, nil, "/nonexistent-temp-root")
	if err == nil || !strings.Contains(err.Error(), locked) || !strings.Contains(err.Error(), "chmod o+x") {
		t.Errorf("ensureReachable under a 0700 directory: %v; want an error naming it and the fix", err)
	}
	if err := o.ensureReachable(dir, []string{locked, filepath.Dir(locked)}, "/nonexistent-temp-root"); err != nil {
		t.Errorf("ensureReachable under a directory Start made: %v", err)
	}
	if st, _ := os.Stat(locked); st.Mode().Perm()&0o001 == 0 {
		t.Errorf("mode of a directory Start made = %s, want o+x", st.Mode().Perm())
	}
}

func TestRefusesForeignDir(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("only root hands the directory to another account")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Start(t.Context(), Config{Dir: dir, Fast: true})
	if err == nil || !strings.Contains(err.Error(), "already holds other files") {
		t.Errorf("Start in a directory holding other files: %v", err)
	}
}

func TestFindBinaries(t *testing.T) {
	t.Parallel()
	notFound := func(string) (string, error) { return "", errors.New("not found") }

	_, err := findBinaries(notFound, nil)
	if !errors.Is(err, ErrNoBinaries) {
		t.Fatalf("empty search: err = %v, want ErrNoBinaries", err)
	}
	for _, hint := range []string{"apt-get install postgresql", "docker compose up", "compose.yaml"} {
		if !strings.Contains(err.Error(), hint) {
			t.Errorf("error %q does not mention %q", err, hint)
		}
	}

	// The highest version wins, by number rather than by string.
	root := t.TempDir()
	for _, v := range []string{"9.6", "15", "16", "100-broken"} {
		bin := filepath.Join(root, v, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		names := []string{"pg_ctl", "initdb", "postgres"}
		if v == "100-broken" {
			names = names[:1]
		}
		for _, name := range names {
			if err := os.WriteFile(filepath.Join(bin, name), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := findBinaries(notFound, []string{filepath.Join(root, "*", "bin")})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "16", "bin"); got != want {
		t.Errorf("findBinaries = %s, want %s", got, want)
	}

	// pg_ctl on PATH comes first, symlinks resolved.
	link := filepath.Join(t.TempDir(), "pg_ctl")
	if err := os.Symlink(filepath.Join(root, "9.6", "bin", "pg_ctl"), link); err != nil {
		t.Fatal(err)
	}
	onPath := func(string) (string, error) { return link, nil }
	got, err = findBinaries(onPath, []string{filepath.Join(root, "*", "bin")})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "9.6", "bin"); got != want {
		t.Errorf("findBinaries with pg_ctl on PATH = %s, want %s", got, want)
	}
}
