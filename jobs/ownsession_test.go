package jobs_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
)

// A drain reads what it needs of its tenant — the handler's secret and
// auth, the WhatsApp credential — on the connection it holds, never waiting
// for one of the pool's: with every other pool connection taken (at load
// 20–35 the pool was drained by everyone else), the handler is still
// called and the reply still sent. (main: the secret was read on the pool,
// and the drain waited for the first connection given back.)
func TestDrainReadsItsTenantOnItsOwnConnection(t *testing.T) {
	t.Parallel()
	called := make(chan struct{}, 1)
	h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case called <- struct{}{}:
		default:
		}
		_, _ = io.WriteString(w, `{"replies":[{"type":"text","text":{"body":"pong"}}]}`)
	}))
	t.Cleanup(h.Close)
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL, Config: jobs.Config{Workers: 1}})
	ctx := context.Background()
	held := make(chan []*pgxpool.Conn, 1)
	var once sync.Once
	jobs.SetBeforeEffect(b.Runner, func(int64) {
		once.Do(func() { // the handle step: the first effect
			// Take every connection the pool has left; the drain holds
			// its own.
			var conns []*pgxpool.Conn
			for {
				actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				c, err := b.Pool.Acquire(actx)
				cancel()
				if err != nil {
					break
				}
				conns = append(conns, c)
			}
			held <- conns
		})
	})
	if _, err := b.Engine.Ingest(ctx, engine.NewMessage{
		Tenant: b.Tenant.Slug, ConversationID: "c1", MessageID: "in1", Direction: "inbound", Payload: []byte(`{"text":"ping"}`),
	}); err != nil {
		t.Fatal(err)
	}
	var got bool
	select {
	case <-called:
		got = true
	case <-time.After(10 * time.Second):
	}
	conns := <-held
	for _, c := range conns {
		c.Release()
	}
	if !got {
		t.Fatalf("the handler was not called in 10 s while the pool's other %d connections were taken: the drain waited for the pool", len(conns))
	}
	b.WaitFor("the reply", 10*time.Second, func() bool { return len(b.WhatsApp.Sends()) == 1 })
}
