package jobs_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
	"github.com/ordo-dev/ordo/tenants"
)

// heldLocks counts the conversation locks held in the test's database.
const heldLocks = `
SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND classid = x'6f72646f'::int::oid AND objsubid = 2
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`

// batchSetup is an unpaced tenant (acme) whose credential the workers have
// cached already (one message sent), so its quiet conversations are
// claimed in batches from the start.
func batchSetup(t *testing.T, cfg jobs.Config) *jobstest.Bundle {
	t.Helper()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: cfg})
	if _, err := b.Tenants.Update(context.Background(), "acme", tenants.UpdateParams{SendRate: ptr(0)}); err != nil {
		t.Fatal(err)
	}
	b.Start()
	b.Ingest("warm", "warm-1", "warm")
	b.WaitFor("the first send", 10*time.Second, func() bool { return len(b.WhatsApp.SendsTo("warm")) == 1 })
	return b
}

// importQuiet queues one message in each of n conversations in one
// transaction, as an application's import does, of messages checked
// already (checked => true, as ordo's ingest stores them): the batches
// start at once. An import of unchecked messages is batched once a drain
// checked them (TestSQLImportBatchedOnceChecked).
func importQuiet(t *testing.T, b *jobstest.Bundle, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
		for i := range n {
			conv := fmt.Sprintf("%s%03d", prefix, i)
			if _, err := tx.Exec(ctx, `SELECT ordo.enqueue_message('acme', $1, $1 || '-1', 'outbound', $2::jsonb, checked => true)`, conv, jobstest.Outbound(conv, conv+" one")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("import: %v", err)
	}
}

// importBacklogs queues each messages ("<conv> #0", "#1", …) in each of n
// conversations in one transaction, checked as importQuiet's.
func importBacklogs(t *testing.T, b *jobstest.Bundle, prefix string, n, each int) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
		for i := range n {
			conv := fmt.Sprintf("%s%03d", prefix, i)
			for k := range each {
				if _, err := tx.Exec(ctx, `SELECT ordo.enqueue_message('acme', $1, $1 || '-' || $2::int, 'outbound', $3::jsonb, checked => true)`,
					conv, k, jobstest.Outbound(conv, fmt.Sprintf("%s #%d", conv, k))); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("import: %v", err)
	}
}

// sentInOrder fails t unless each of the n conversations prefix000… had
// its messages ("<conv> #0", "#1", …, as importBacklogs queues them) sent
// in order, each once.
func sentInOrder(t *testing.T, b *jobstest.Bundle, prefix string, n int) {
	t.Helper()
	for i := range n {
		conv := fmt.Sprintf("%s%03d", prefix, i)
		for k, s := range b.WhatsApp.SendsTo(conv) {
			if want := fmt.Sprintf("%s #%d", conv, k); s.Text != want {
				t.Fatalf("%s: send %d is %q, want %q: out of order or twice", conv, k, s.Text, want)
			}
		}
	}
}

// Quiet conversations go out in batches, each message once, and the
// process never has more conversations in flight than Config.Workers plus
// its overdraft for a waiting tenant with nothing running (Workers/8, at
// least 1: between a runner's pick and its claim the tenant has nothing
// running yet), however many a batch could hold (issue 11).
func TestQuietConversationsAreSentInBatchesWithinWorkers(t *testing.T) {
	t.Parallel()
	const workers, n = 4, 60
	b := batchSetup(t, jobs.Config{Workers: workers, BatchSize: 8})
	var inFlight, most atomic.Int64
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		now := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		time.Sleep(30 * time.Millisecond)
		return whatsapptest.Default(req, attempt)
	})
	importQuiet(t, b, "q", n)
	b.WaitFor("every message sent", 30*time.Second, func() bool { return len(b.WhatsApp.Sends()) >= n+1 })
	b.WaitFor("every message done", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == n+1
	})
	for i := range n {
		conv := fmt.Sprintf("q%03d", i)
		if got := len(b.WhatsApp.SendsTo(conv)); got != 1 {
			t.Fatalf("%s: %d sends, want 1", conv, got)
		}
	}
	if got := jobs.Batches(b.Runner); got == 0 {
		t.Fatal("no batch was claimed: the test proves nothing")
	}
	if m := most.Load(); m > workers+1 {
		t.Fatalf("%d sends in flight at once with %d workers (and an overdraft of 1)", m, workers)
	}
	b.WaitFor("the ready set to empty", 5*time.Second, func() bool { return b.Count(`SELECT count(*) FROM ordo.ready`) == 0 })
	if held := b.Count(heldLocks); held != 0 {
		t.Fatalf("%d conversation locks still held after every drain ended", held)
	}
}

// A batch's failed sends are settled one by one as their own drains would:
// a permanent error is a dead letter that halts its conversation, an
// ambiguous one is retried and sent once; the batch's other sends are
// recorded with the batch.
func TestBatchSettlesEachFailedSendLikeItsOwnDrain(t *testing.T) {
	t.Parallel()
	const n = 12
	b := batchSetup(t, jobs.Config{Workers: 4, BatchSize: 8})
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		switch {
		case req.To == "q003":
			return whatsapptest.Response{Status: http.StatusBadRequest, ErrorCode: 131026}
		case req.To == "q005" && attempt == 1:
			return whatsapptest.Response{Status: http.StatusInternalServerError}
		}
		return whatsapptest.Default(req, attempt)
	})
	importQuiet(t, b, "q", n)
	b.WaitFor("the dead letter", 20*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.dead_letters`) == 1
	})
	b.WaitFor("every other message sent", 20*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == n
	})
	for i := range n {
		conv := fmt.Sprintf("q%03d", i)
		want := 1
		if conv == "q003" {
			want = 0
		}
		if got := len(b.WhatsApp.SendsTo(conv)); got != want {
			t.Fatalf("%s: %d sends, want %d", conv, got, want)
		}
	}
	if got := b.Count(`SELECT count(*) FROM ordo.conversations WHERE halted_at IS NOT NULL AND conversation_id = 'q003'`); got != 1 {
		t.Fatal("the dead-lettered conversation is not halted (tenant policy halt)")
	}
	if got := jobs.Batches(b.Runner); got == 0 {
		t.Fatal("no batch was claimed: the test proves nothing")
	}
	b.WaitFor("locks released", 5*time.Second, func() bool {
		return b.Count(heldLocks) == 0
	})
}

// An application's import holding one conversation of a batch does not hold
// the batch: the other conversations are recorded at once, and the held one
// alone once the import commits — its message and the import's, in order.
// Without SKIP LOCKED the batch's finish waited for the import (and an
// import taking the batch's rows in another order deadlocked with it).
func TestBatchDoesNotWaitForAnImportHoldingOneConversation(t *testing.T) {
	t.Parallel()
	const n = 8
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{Workers: 4, BatchSize: 8}})
	if _, err := b.Tenants.Update(context.Background(), "acme", tenants.UpdateParams{SendRate: ptr(0)}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var (
		once  sync.Once
		tx    pgx.Tx
		txErr error
	)
	held := make(chan struct{})
	jobs.SetHooks(b.Runner, func(conv int64) {
		var id string
		if err := b.Pool.QueryRow(ctx, `SELECT conversation_id FROM ordo.conversations WHERE id = $1`, conv).Scan(&id); err != nil || id != "q000" {
			return
		}
		once.Do(func() {
			// The import adds the conversation's next message and keeps
			// its row locked until it commits.
			tx, txErr = b.Pool.Begin(ctx)
			if txErr == nil {
				_, txErr = tx.Exec(ctx, `SELECT ordo.enqueue_message('acme', 'q000', 'q000-2', 'outbound', $1::jsonb)`, jobstest.Outbound("q000", "q000 two"))
			}
			close(held)
		})
	}, nil)
	b.Start()
	b.Ingest("warm", "warm-1", "warm")
	b.WaitFor("the first send", 10*time.Second, func() bool { return len(b.WhatsApp.SendsTo("warm")) == 1 })
	importQuiet(t, b, "q", n)
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("q000 was never finished")
	}
	if txErr != nil {
		t.Fatalf("import: %v", txErr)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) }) // a failed test lets the runner stop
	b.WaitFor("the batch's other messages recorded while the import is open", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages m JOIN ordo.conversations c ON c.id = m.conversation_pk
			WHERE m.status = 'done' AND c.conversation_id LIKE 'q%' AND c.conversation_id <> 'q000'`) == n-1
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.WaitFor("q000's two messages", 10*time.Second, func() bool { return len(b.WhatsApp.SendsTo("q000")) == 2 })
	b.WaitFor("q000 caught up", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages m JOIN ordo.conversations c ON c.id = m.conversation_pk
			WHERE m.status = 'done' AND c.conversation_id = 'q000'`) == 2
	})
	s := b.WhatsApp.SendsTo("q000")
	if s[0].Text != "q000 one" || s[1].Text != "q000 two" {
		t.Fatalf("q000 sent %q then %q", s[0].Text, s[1].Text)
	}
	if got := jobs.Batches(b.Runner); got == 0 {
		t.Fatal("no batch was claimed: the test proves nothing")
	}
}

// A batch drains conversations with a backlog round by round — each
// round's finish starts every conversation's next message — while another
// message joins mid-run and a second worker process competes for the same
// conversations: every message is sent once, in order.
func TestBatchDrainsBacklogsInOrderOnce(t *testing.T) {
	t.Parallel()
	const convs, per = 30, 6
	b := batchSetup(t, jobs.Config{Workers: 8, BatchSize: 8})
	slowProvider(b, 5*time.Millisecond)
	b.StartAnother()
	ctx := context.Background()
	want := map[string][]string{"warm": {"warm"}}
	err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
		for m := range per {
			for c := range convs {
				conv, text := fmt.Sprintf("b%02d", c), fmt.Sprintf("b%02d-%d", c, m)
				want[conv] = append(want[conv], text)
				if _, err := tx.Exec(ctx, `SELECT ordo.enqueue_message('acme', $1, $2, 'outbound', $3::jsonb)`, conv, text, jobstest.Outbound(conv, text)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	b.WaitFor("a few sends", 10*time.Second, func() bool { return len(b.WhatsApp.Sends()) > 20 })
	b.Ingest("b00", "b00-late", "b00-late")
	want["b00"] = append(want["b00"], "b00-late")
	b.WaitFor("every message sent", 30*time.Second, func() bool { return len(b.WhatsApp.Sends()) >= convs*per+2 })
	b.WaitFor("every message done", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == convs*per+2
	})
	if rep := whatsapptest.Check(b.WhatsApp.Sends(), want); !rep.OK() {
		t.Fatal(rep.String())
	}
	if got := jobs.Batches(b.Runner); got == 0 {
		t.Fatal("no batch was claimed: the test proves nothing")
	}
}

// A tenant's first claim on a process is a batch like every later one: the
// runner reads the tenant's credential before that claim. Claimed alone
// (the number was not cached yet), each of a backlog's first conversations
// was drained one message at a time by a worker of its own: `make bench`
// backlog, 100 tenants, drained its first 10 % at 1,938 msgs/s and its last
// at 4,622 (with the credential read first: 4,422 and 5,173).
func TestFirstClaimOfATenantIsABatch(t *testing.T) {
	t.Parallel()
	const convs, per = 8, 3
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{Workers: convs, BatchSize: convs}})
	if _, err := b.Tenants.Update(context.Background(), "acme", tenants.UpdateParams{SendRate: ptr(0)}); err != nil {
		t.Fatal(err)
	}
	importBacklogs(t, b, "f", convs, per)
	b.Start()
	b.WaitFor("every message done", 30*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == convs*per
	})
	want := map[string][]string{}
	for c := range convs {
		conv := fmt.Sprintf("f%03d", c)
		for k := range per {
			want[conv] = append(want[conv], fmt.Sprintf("%s #%d", conv, k))
		}
	}
	if rep := whatsapptest.Check(b.WhatsApp.Sends(), want); !rep.OK() {
		t.Fatal(rep.String())
	}
	if got := jobs.Batches(b.Runner); got == 0 {
		t.Fatal("no batch was claimed")
	}
	if got := jobs.AloneClaims(b.Runner); got != 0 {
		t.Fatalf("%d conversations claimed alone: the tenant's first claim did not batch", got)
	}
}

// A tenant with nothing running gets a worker while a campaign's drains and
// batches hold all of a process's room: one beyond Config.Workers (at most
// the room's overdraft). Without it the quiet message waited for the
// campaign's round to end (`make bench` noisy: its p99 grew several times
// over with batches); here the campaign's sends are held until the
// quiet message has gone out.
func TestTenantWithNothingRunningIsNotHeldBehindACampaignsRoom(t *testing.T) {
	t.Parallel()
	const workers = 4
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{Workers: workers, BatchSize: 8, SendTimeout: 10 * time.Second, Lease: 15 * time.Second}})
	gate := make(chan struct{})
	var held atomic.Int64
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		if req.PhoneNumberID == "2000001" {
			held.Add(1)
			select {
			case <-gate:
			case <-time.After(8 * time.Second):
			}
		}
		return whatsapptest.Default(req, attempt)
	})
	b.AddTenant("campaign", "2000001", tenants.UpdateParams{SendRate: ptr(0)})
	b.AddTenant("quiet", "3000001", tenants.UpdateParams{SendRate: ptr(0)})
	b.Start()
	// Both tenants' credentials cached, so the campaign is claimed in batches.
	b.IngestFor("quiet", "q0", "q0-1", "q0 one")
	b.WaitFor("the quiet tenant's first send", 10*time.Second, func() bool { return len(b.WhatsApp.SendsTo("q0")) == 1 })
	// The campaign's first message is held from here on, so the campaign
	// always has something running: it is never urgent itself (at its
	// start it could take the overdraft, and hold it until the next
	// message boundary of that drain, which the held sends never reach).
	b.IngestFor("campaign", "warm", "warm-1", "warm")
	b.WaitFor("the campaign's first send to be held", 10*time.Second, func() bool { return held.Load() == 1 })
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error { // the campaign: an import (checked, as importQuiet's)
		for c := range 20 {
			conv := fmt.Sprintf("n%02d", c)
			if _, err := tx.Exec(ctx, `SELECT ordo.enqueue_message('campaign', $1, $1 || '-1', 'outbound', $2::jsonb, checked => true)`, conv, jobstest.Outbound(conv, conv+" one")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	b.WaitFor("the process's room held by the campaign's sends", 10*time.Second, func() bool { return held.Load() >= workers })
	b.IngestFor("quiet", "q1", "q1-1", "q1 one")
	b.WaitFor("the quiet message sent while the campaign holds the room", 5*time.Second, func() bool {
		return len(b.WhatsApp.SendsTo("q1")) == 1
	})
	if n := held.Load(); n > workers {
		t.Fatalf("%d campaign sends in flight with %d workers: only the quiet tenant may go beyond the room", n, workers)
	}
	close(gate)
	b.WaitFor("the campaign", 20*time.Second, func() bool { return len(b.WhatsApp.Sends()) >= 20+3 })
	if got := len(b.WhatsApp.SendsTo("warm")); got != 1 {
		t.Fatalf("the campaign's first message sent %d times", got)
	}
	if got := jobs.Batches(b.Runner); got == 0 {
		t.Fatal("no batch was claimed: the test proves nothing")
	}
}

// Meta pausing the tenant (its account locked) in the middle of a batch
// stops the batch: no other conversation of the tenant sends again. Before,
// the batch's finish started every other conversation's next message and
// the batch sent them all, the pause notwithstanding (it was checked only
// when a batch was claimed); and with the pause checked there too, the
// others went out once more: the finish came before the failed
// conversation's pause was recorded.
func TestBatchStopsWhenMetaPausesTheTenant(t *testing.T) {
	t.Parallel()
	const n, each = 8, 3
	b := batchSetup(t, jobs.Config{Workers: 8, BatchSize: 8})
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		if req.To == "p000" {
			return whatsapptest.Response{Status: http.StatusForbidden, ErrorCode: 131031}
		}
		// Slow enough that a batch without p000 is still in its second
		// round when p000's batch has paused the tenant.
		r := whatsapptest.Default(req, attempt)
		r.Delay = 200 * time.Millisecond
		return r
	})
	importBacklogs(t, b, "p", n, each)
	b.WaitFor("the tenant paused", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.tenants WHERE sending_paused_at IS NOT NULL`) == 1
	})
	time.Sleep(time.Second) // a batch that goes on sends its next rounds meanwhile
	if got := jobs.Batches(b.Runner); got == 0 {
		t.Fatal("no batch was claimed: the test proves nothing")
	}
	for i := 1; i < n; i++ {
		conv := fmt.Sprintf("p%03d", i)
		if got := len(b.WhatsApp.SendsTo(conv)); got > 1 {
			t.Fatalf("%s: %d of its %d messages sent; only the first, in flight when Meta locked the account, may go", conv, got, each)
		}
	}
	b.WaitFor("locks released", 5*time.Second, func() bool {
		return b.Count(heldLocks) == 0
	})
}

// A batch runs while the tenant's sending is paused elsewhere (another
// process's drain met Meta's refusal): the round in flight is recorded and
// no conversation of the batch starts its next message; once resumed, every
// message goes out, once and in order. Before, a running batch went on
// sending until its run ended.
func TestBatchStopsWhenTheTenantIsPausedElsewhere(t *testing.T) {
	t.Parallel()
	const n, each = 4, 3
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{Workers: 8, BatchSize: 8}})
	ctx := context.Background()
	if _, err := b.Tenants.Update(ctx, "acme", tenants.UpdateParams{SendRate: ptr(0)}); err != nil {
		t.Fatal(err)
	}
	var (
		once  sync.Once
		armed atomic.Bool
	)
	jobs.SetHooks(b.Runner, func(int64) {
		if !armed.Load() {
			return
		}
		once.Do(func() {
			if _, err := b.Pool.Exec(ctx, `UPDATE ordo.tenants SET sending_paused_at = now(), sending_paused_reason = 'elsewhere' WHERE slug = 'acme'`); err != nil {
				t.Error(err)
			}
		})
	}, nil)
	b.Start()
	b.Ingest("warm", "warm-1", "warm") // the credential cached: batches need its number
	// Done, not only sent: its finish (which runs the hook) is behind it.
	b.WaitFor("the first message done", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == 1
	})
	armed.Store(true)
	importBacklogs(t, b, "e", n, each)
	b.WaitFor("the first round", 10*time.Second, func() bool { return len(b.WhatsApp.Sends()) > 1 })
	time.Sleep(time.Second)
	if got := jobs.Batches(b.Runner); got == 0 {
		t.Fatal("no batch was claimed: the test proves nothing")
	}
	for i := range n {
		if conv := fmt.Sprintf("e%03d", i); len(b.WhatsApp.SendsTo(conv)) > 1 {
			t.Fatalf("%s: %d sends while the tenant's sending was paused", conv, len(b.WhatsApp.SendsTo(conv)))
		}
	}
	if _, err := b.Tenants.ResumeSending(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	b.WaitFor("every message sent after the resume", 20*time.Second, func() bool { return len(b.WhatsApp.Sends()) == 1+n*each })
	sentInOrder(t, b, "e", n)
	b.WaitFor("locks released", 5*time.Second, func() bool {
		return b.Count(heldLocks) == 0
	})
}

// An application's import through SQL (unchecked: no Go saw it) is checked
// by the drain that meets its first message, which checks the tenant's
// other unchecked messages at the heads of its conversations along with it:
// the rest are claimed in batches, and every message is checked once and
// sent once, in order.
func TestSQLImportBatchedOnceChecked(t *testing.T) {
	t.Parallel()
	const n, each = 24, 2
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{Workers: 8, BatchSize: 8}})
	if _, err := b.Tenants.Update(context.Background(), "acme", tenants.UpdateParams{SendRate: ptr(0)}); err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		checks = map[int64]int{}
	)
	jobs.SetCheckHook(b.Runner, func(messagePK int64) {
		mu.Lock()
		defer mu.Unlock()
		checks[messagePK]++
	})
	b.Start()
	b.Ingest("warm", "warm-1", "warm") // the credential cached: batches may start
	b.WaitFor("the first send", 10*time.Second, func() bool { return len(b.WhatsApp.SendsTo("warm")) == 1 })
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
		for i := range n {
			conv := fmt.Sprintf("s%03d", i)
			for k := range each {
				if _, err := tx.Exec(ctx, `SELECT ordo.enqueue_message('acme', $1, $1 || '-' || $2::int, 'outbound', $3::jsonb)`,
					conv, k, jobstest.Outbound(conv, fmt.Sprintf("%s #%d", conv, k))); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	b.WaitFor("every message sent", 30*time.Second, func() bool { return len(b.WhatsApp.Sends()) >= 1+n*each })
	if got := jobs.Batches(b.Runner); got == 0 {
		t.Error("no batch was claimed: the import was drained one conversation at a time")
	}
	for i := range n {
		conv := fmt.Sprintf("s%03d", i)
		sends := b.WhatsApp.SendsTo(conv)
		if len(sends) != each || sends[0].Text != conv+" #0" || sends[1].Text != conv+" #1" {
			t.Fatalf("%s: sent %d, want its %d messages once each, in order", conv, len(sends), each)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(checks) != n*each {
		t.Errorf("%d messages checked, want the import's %d", len(checks), n*each)
	}
	for pk, c := range checks {
		if c != 1 {
			t.Errorf("message row %d checked %d times, want once", pk, c)
		}
	}
}

// A campaign whose messages keep arriving while it drains — one tenant
// alone, clients offering each conversation's messages in order, as
// `make bench` hot does — goes out in batches that gather: a round's
// write records several conversations' sends, not one. Before gathering,
// every runner claimed as soon as a conversation became due, so the
// campaign ran as many batches of one as there were runners (bench hot:
// 1.1 conversations a round, 0.64 × river-plain).
func TestACampaignArrivingOverTimeGoesOutInGatheredBatches(t *testing.T) {
	t.Parallel()
	const clients, convsEach, messages = 8, 4, 8
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{Workers: 8, BatchSize: 8}})
	if _, err := b.Tenants.Update(context.Background(), "acme", tenants.UpdateParams{SendRate: ptr(0)}); err != nil {
		t.Fatal(err)
	}
	calls := countCalls(t, b)
	b.Start()
	b.Ingest("warm", "warm-1", "warm")
	b.WaitFor("the first send", 10*time.Second, func() bool { return len(b.WhatsApp.SendsTo("warm")) == 1 })
	want := map[string][]string{}
	for c := range clients * convsEach {
		conv := fmt.Sprintf("g%02d", c)
		for k := range messages {
			want[conv] = append(want[conv], fmt.Sprintf("%s #%d", conv, k))
		}
	}
	for err := range offerCampaign(b, clients, convsEach, messages) {
		t.Fatalf("ingest: %v", err)
	}
	total := clients * convsEach * messages
	b.WaitFor("every message sent", time.Minute, func() bool { return len(b.WhatsApp.Sends()) >= total+1 })
	var sends []whatsapptest.Send
	for _, s := range b.WhatsApp.Sends() {
		if s.To != "warm" {
			sends = append(sends, s)
		}
	}
	if rep := whatsapptest.Check(sends, want); !rep.OK() {
		t.Fatal(rep.String())
	}
	reportCalls(t, b)
	finishes := calls("finish")
	// Gathered, a round records most of a batch (5.4–6.2 in four runs);
	// a runner per due conversation recorded 2.4–2.8 (bench hot: 1.1).
	if per := float64(total) / float64(finishes); per < 4 {
		t.Fatalf("%d messages recorded by %d finish calls, %.1f a call; want batches that gather (at least 4 a call)", total, finishes, per)
	}
}

// offerCampaign offers acme's campaign as clients would, each owning
// convsEach conversations ("gNN") and offering their messages ("gNN #k")
// in order, one request after another; the channel yields each client's
// error and is closed when every client is done.
func offerCampaign(b *jobstest.Bundle, clients, convsEach, messages int) <-chan error {
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for cl := range clients {
		wg.Go(func() {
			for k := range messages {
				for i := range convsEach {
					conv := fmt.Sprintf("g%02d", cl*convsEach+i)
					_, err := b.Engine.Ingest(context.Background(), engine.NewMessage{
						Tenant: "acme", ConversationID: conv, MessageID: fmt.Sprintf("%s-%d", conv, k), Payload: jobstest.Outbound(conv, fmt.Sprintf("%s #%d", conv, k)),
					})
					if err != nil {
						errs <- err
						return
					}
					time.Sleep(2 * time.Millisecond) // a client's next request
				}
			}
		})
	}
	go func() {
		wg.Wait()
		close(errs)
	}()
	return errs
}

// A batch claimed on the tenant's cached number whose credential has become
// unreadable since (set again with a master key this process lacks, or
// altered) sends nothing: each conversation takes its started send back,
// the tenant's sending is paused once, and no attempt is burnt; set right
// and resumed, every message goes out once and in order. Each
// conversation of such a batch is ended with one step of the drain's step
// machine, not with a drain of its own run inside the batch's.
func TestBatchWithAnUnreadableCredentialPausesAndLosesNothing(t *testing.T) {
	t.Parallel()
	const n, each = 4, 3
	b := batchSetup(t, jobs.Config{Workers: 8, BatchSize: 8})
	ctx := context.Background()
	var saved []byte
	if err := b.Pool.QueryRow(ctx, `SELECT ciphertext FROM ordo.credentials WHERE name = 'whatsapp' AND tenant_id = (SELECT id FROM ordo.tenants WHERE slug = 'acme')`).Scan(&saved); err != nil {
		t.Fatal(err)
	}
	spoil := `UPDATE ordo.credentials SET ciphertext = $1, updated_at = clock_timestamp() WHERE name = 'whatsapp' AND tenant_id = (SELECT id FROM ordo.tenants WHERE slug = 'acme')`
	if _, err := b.Pool.Exec(ctx, spoil, append([]byte{saved[0] ^ 0xff}, saved[1:]...)); err != nil {
		t.Fatal(err)
	}
	importBacklogs(t, b, "u", n, each)
	b.WaitFor("the tenant paused", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.tenants WHERE sending_paused_at IS NOT NULL AND sending_paused_reason LIKE '%cannot be decrypted%'`) == 1
	})
	b.WaitFor("every conversation waiting, its lock released", 10*time.Second, func() bool {
		return b.Count(heldLocks) == 0 && b.Count(`SELECT count(*) FROM ordo.steps WHERE status = 'running'`) == 0
	})
	if got := jobs.Batches(b.Runner); got == 0 {
		t.Fatal("no batch was claimed: the test proves nothing")
	}
	if got := len(b.WhatsApp.Sends()); got != 1 {
		t.Fatalf("%d sends with an unreadable credential, want only the warm-up", got-1)
	}
	if got := b.Count(`SELECT count(*) FROM ordo.steps WHERE attempts > 0 AND status <> 'done'`); got != 0 {
		t.Fatalf("%d steps lost an attempt to a credential no send could use", got)
	}
	if got := b.Count(`SELECT count(*) FROM ordo.dead_letters`); got != 0 {
		t.Fatalf("%d dead letters", got)
	}
	if _, err := b.Pool.Exec(ctx, spoil, saved); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Tenants.ResumeSending(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	b.WaitFor("every message sent after the resume", 20*time.Second, func() bool { return len(b.WhatsApp.Sends()) == 1+n*each })
	sentInOrder(t, b, "u", n)
}
