package hacluster

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestFailover starts a three-node cluster and moves its primary the three
// ways the crash run does; through the multi-host URL a pool keeps writing,
// and every row it was told was committed is on the new primary.
func TestFailover(t *testing.T) {
	for _, bin := range []string{"patroni", "etcd"} {
		if _, err := lookPath(bin); err != nil {
			t.Skipf("%s is not installed (make chaos-ha installs it)", bin)
		}
	}
	if _, err := exec.LookPath("pg_ctl"); err != nil {
		if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl"); len(m) == 0 {
			t.Skip("no PostgreSQL server binaries")
		}
	}
	t.Parallel()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "ordo-hacluster-")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(ctx, Config{Dir: dir, Logf: t.Logf, Settings: map[string]string{"fsync": "off"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		c.Stop(ctx)
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("kept %s", dir)
		}
	}()
	pool, err := pgxpool.New(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE TABLE acked (n int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	acked := 0
	write := func(limit time.Duration) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for {
			_, err := pool.Exec(ctx, "INSERT INTO acked VALUES ($1)", acked+1)
			var pgErr *pgconn.PgError
			// A unique violation: an earlier try whose answer the failover
			// cut off did commit, and the new primary has it.
			if err == nil || errors.As(err, &pgErr) && pgErr.Code == "23505" {
				acked++
				return
			} else if time.Now().After(deadline) {
				t.Fatalf("no write within %s after the primary moved: %v", limit, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	write(time.Second)
	move := func(what string, f func(h Health) error) {
		h, err := c.Healthy(ctx)
		if err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		if err := f(h); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		write(2 * time.Minute)
		wrote := time.Since(began)
		h2, err := c.WaitHealthy(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: leader %s → %s (timeline %d → %d), first write after %s, healthy after %s",
			what, h.Leader, h2.Leader, h.Timeline, h2.Timeline, wrote.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	}
	move("switchover", func(h Health) error { return c.Switchover(ctx, h.Leader, h.Sync) })
	move("kill -9 postmaster", func(h Health) error { _, err := c.KillPostmaster(c.Node(h.Leader)); return err })
	move("standby restart", func(h Health) error {
		for _, n := range c.Nodes {
			if n.Name != h.Leader {
				return c.Restart(ctx, n)
			}
		}
		return nil
	})
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM acked").Scan(&n); err != nil || n != acked {
		t.Fatalf("%d rows on the primary, %d acknowledged (%v)", n, acked, err)
	}
}
