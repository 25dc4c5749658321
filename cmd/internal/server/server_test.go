package server

import (
	"strings"
	"testing"
	"time"
)

// The pool's sizes: ordo's where DATABASE_URL is silent, the URL's where
// it speaks; a URL that is not one is an error that does not echo it (it
// may hold a password).
func TestPoolConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url      string
		maxConns int32
		idle     time.Duration
	}{
		{"postgres://u:p@localhost/ordo", 75, PoolIdleDefault},
		{"postgres://u:p@localhost/ordo?pool_max_conns=9&pool_max_conn_idle_time=5m", 9, 5 * time.Minute},
	} {
		cfg, err := poolConfig(c.url, 50)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.MaxConns != c.maxConns || cfg.MaxConnIdleTime != c.idle {
			t.Errorf("%s: max %d, idle %s; want %d and %s", c.url, cfg.MaxConns, cfg.MaxConnIdleTime, c.maxConns, c.idle)
		}
	}
	if _, err := poolConfig("postgres://u:secret@localhost:notaport/ordo", 50); err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("a bad URL: %v; want an error without the password", err)
	}
}
