package jobs

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/sql/sqltest"
)

// pacedConversations creates tenant acme at send_rate rate with n
// conversations (c0, c1, …) of one queued outbound message each.
func pacedConversations(t *testing.T, rate, n int) (pool *pgxpool.Pool, tenant int64, convs []int64) {
	t.Helper()
	ctx := context.Background()
	pool = sqltest.New(t)
	if err := pool.QueryRow(ctx, `INSERT INTO ordo.tenants (slug, send_rate) VALUES ('acme', $1) RETURNING id`, rate).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	convs = make([]int64, n)
	for i := range convs {
		if _, err := pool.Exec(ctx, `SELECT ordo.enqueue_message('acme', 'c' || $1::int, 'm' || $1::int, 'outbound', '{}')`, i); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `SELECT id FROM ordo.conversations WHERE conversation_id = 'c' || $1::int`, i).Scan(&convs[i]); err != nil {
			t.Fatal(err)
		}
	}
	return pool, tenant, convs
}

// reserveSend asks ordo.reserve_send for conversation conv of tenant on
// number P1; the wait is -1 when there is none (paused).
func reserveSend(t *testing.T, pool *pgxpool.Pool, tenant, conv int64, horizon time.Duration) (string, time.Duration) {
	t.Helper()
	var (
		verdict string
		wait    *time.Duration
	)
	if err := pool.QueryRow(context.Background(), `SELECT verdict, wait FROM ordo.reserve_send($1, $2, 0, 'P1', $3)`, tenant, conv, horizon).Scan(&verdict, &wait); err != nil {
		t.Fatal(err)
	}
	if wait == nil {
		return verdict, -1
	}
	return verdict, *wait
}

// ordo.reserve_send, the pacing's one decision, on its own: slots exactly
// 1/send_rate apart, a reserved slot kept across calls, a throttle that
// moves slots out, the pair gap, a paused tenant. Pinned on the database's
// clock, so it holds however loaded the machine is.
func TestReserveSendSpacing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// One send a second: reserved slots stay in the future however slow
	// this test runs.
	pool, tenant, convs := pacedConversations(t, 1, 6)
	reserve := func(conv int64, horizon time.Duration) (string, time.Duration) {
		t.Helper()
		return reserveSend(t, pool, tenant, conv, horizon)
	}
	ticket := func(conv int64) time.Time {
		t.Helper()
		var at *time.Time
		if err := pool.QueryRow(ctx, `SELECT send_slot_at FROM ordo.conversations WHERE id = $1`, conv).Scan(&at); err != nil || at == nil {
			t.Fatalf("conversation %d has no reserved slot (%v)", conv, err)
		}
		return *at
	}
	nextSlot := func() time.Time {
		t.Helper()
		var at time.Time
		if err := pool.QueryRow(ctx, `SELECT next_slot FROM ordo.send_pacing WHERE phone_number_id = 'P1'`).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}

	// With no horizon to sleep in, the first send goes and the next four
	// keep slots 1/send_rate apart.
	if v, w := reserve(convs[0], 0); v != "go" || w != 0 {
		t.Fatalf("first send: %s %s; want go now", v, w)
	}
	for _, c := range convs[1:5] {
		if v, w := reserve(c, 0); v != "wait" || w <= 0 || w > 5*time.Second {
			t.Fatalf("conversation %d: %s %s; want a short wait", c, v, w)
		}
	}
	const spacing = time.Second
	for i := 2; i < 5; i++ {
		if d := ticket(convs[i]).Sub(ticket(convs[i-1])); d != spacing {
			t.Fatalf("slots %d and %d are %s apart, want %s", i-1, i, d, spacing)
		}
	}
	if d := nextSlot().Sub(ticket(convs[4])); d != spacing {
		t.Fatalf("next slot %s after the last reserved one, want %s", d, spacing)
	}
	// Coming back keeps the slot: nothing new is reserved.
	before := nextSlot()
	if v, _ := reserve(convs[4], 0); v != "wait" || !nextSlot().Equal(before) {
		t.Fatal("a conversation with a reserved slot reserved another")
	}
	// A slot within the horizon is taken (go after a sleep) and cleared.
	if v, w := reserve(convs[1], time.Minute); v != "go" || w < 0 || w > 2*time.Second {
		t.Fatalf("reserved slot within the horizon: %s %s", v, w)
	}
	var cleared bool
	_ = pool.QueryRow(ctx, `SELECT send_slot_at IS NULL FROM ordo.conversations WHERE id = $1`, convs[1]).Scan(&cleared)
	if !cleared {
		t.Fatal("a used slot stayed on its conversation")
	}

	// Meta throttles the number for an hour: a slot reserved before, inside
	// that hour, is given up for one after it.
	if _, err := pool.Exec(ctx, slowNumber, "P1", time.Hour); err != nil {
		t.Fatal(err)
	}
	if v, w := reserve(convs[2], time.Minute); v != "wait" || w < 59*time.Minute {
		t.Fatalf("reserved slot inside a throttle: %s %s; want a wait past the hour", v, w)
	}
	// An unpaced tenant still honours a throttle...
	if _, err := pool.Exec(ctx, `UPDATE ordo.tenants SET send_rate = 0`); err != nil {
		t.Fatal(err)
	}
	if v, w := reserve(convs[5], time.Minute); v != "wait" || w < 59*time.Minute {
		t.Fatalf("unpaced during a throttle: %s %s", v, w)
	}
	// ...and otherwise always goes at once.
	if _, err := pool.Exec(ctx, `DELETE FROM ordo.send_pacing; UPDATE ordo.conversations SET send_slot_at = NULL`); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if v, w := reserve(convs[5], 0); v != "go" || w != 0 {
			t.Fatalf("unpaced: %s %s; want go now", v, w)
		}
	}

	// The pair gap holds a user's next send without taking a number slot.
	if _, err := pool.Exec(ctx, `UPDATE ordo.tenants SET send_rate = 1, pair_gap_ms = 6000`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE ordo.conversations SET pair_ready_at = clock_timestamp() + interval '5 seconds' WHERE id = $1`, convs[0]); err != nil {
		t.Fatal(err)
	}
	if v, w := reserve(convs[0], time.Second); v != "wait" || w < 4*time.Second || w > 5*time.Second {
		t.Fatalf("inside the pair gap: %s %s; want a wait of about 5s", v, w)
	}
	var rows int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM ordo.send_pacing`).Scan(&rows)
	if rows != 0 {
		t.Fatal("waiting for the pair gap took a number slot")
	}
	if v, _ := reserve(convs[1], time.Second); v != "go" {
		t.Fatalf("another user during the first's pair gap: %s; want go", v)
	}

	// A paused tenant does not send.
	if _, err := pool.Exec(ctx, `UPDATE ordo.tenants SET sending_paused_at = now()`); err != nil {
		t.Fatal(err)
	}
	if v, _ := reserve(convs[3], time.Second); v != "paused" {
		t.Fatalf("paused tenant: %s", v)
	}
}

// A drain that comes back late for its slot (a stalled process, a claim
// behind a busy scheduler) must not leave with the sends whose slots come
// after it: slots handed out ahead are only a place in line, and the number's
// sends so far space every send, late or not, beyond a small tolerance for
// jitter. Before, four conversations whose slots had all passed during a
// stall went out together: four sends at Meta in the same instant.
func TestReserveSendSpacesSlotsRedeemedLate(t *testing.T) {
	t.Parallel()
	const rate = 4 // 250ms apart: well beyond the tolerance
	pool, tenant, convs := pacedConversations(t, rate, 5)
	reserve := func(conv int64) (string, time.Duration) {
		t.Helper()
		return reserveSend(t, pool, tenant, conv, 0)
	}
	if v, _ := reserve(convs[0]); v != "go" {
		t.Fatalf("first send: %s", v)
	}
	var last time.Duration
	for _, c := range convs[1:] {
		v, w := reserve(c)
		if v != "wait" || w <= last {
			t.Fatalf("conversation %d: %s %s; want a slot after the one before", c, v, w)
		}
		last = w
	}
	// The stall: every slot handed out has passed.
	time.Sleep(last + 50*time.Millisecond)

	// All four come back at once: one goes, the others wait their turn,
	// each for a place of its own: a slot apart, so they come back one by
	// one. Before, every one of them was told the same wait (until the
	// number's sends so far allowed one more): they came back together, one
	// went and the others asked again, n(n+1)/2 asks for n sends (bench
	// noisy, paced: ordo.start_step ran 10 times a message).
	var (
		goes  int
		waits []time.Duration
	)
	for _, c := range convs[1:] {
		v, w := reserve(c)
		switch {
		case v == "go":
			goes++
		case v != "wait" || w <= 0:
			t.Fatalf("conversation %d: %s %s; want go or a wait", c, v, w)
		default:
			waits = append(waits, w)
		}
	}
	if goes != 1 {
		t.Fatalf("%d of four late slots went at once; the number allows one per %s", goes, time.Second/rate)
	}
	slices.Sort(waits)
	for i := 1; i < len(waits); i++ {
		// A slot apart, less what the asks themselves took.
		if gap := waits[i] - waits[i-1]; gap < time.Second/rate-50*time.Millisecond {
			t.Fatalf("waits %v: two late slots told to come back %s apart; want a slot (%s) apart", waits, gap, time.Second/rate)
		}
	}
	// And the first of them is not sent before the one that went is a slot
	// behind it.
	if waits[0] < time.Second/rate-100*time.Millisecond {
		t.Fatalf("waits %v: the first comes back before the number allows another send", waits)
	}
}

// A conversation a user waits on takes no place in the number's line:
// with a campaign's slots reserved out to ten seconds, the conversation of
// an inbound message, and one whose outbound message follows an inbound
// one by moments (an answer the workflow posts itself), send at once; a
// campaign's conversation does not. They are spaced all the same (a second
// one right after the first waits for the number's next free moment, not
// for the line), and alone on a number too. ordo.enqueue_message marks
// them (ordo.ready.urgent).
func TestReserveSendLetsAUserWaitingGoAheadOfTheLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, tenant, convs := pacedConversations(t, 1, 10)
	reserve := func(conv int64) (string, time.Duration) {
		t.Helper()
		return reserveSend(t, pool, tenant, conv, 0)
	}
	enqueue := func(conv, id, direction string) int64 {
		t.Helper()
		if _, err := pool.Exec(ctx, `SELECT ordo.enqueue_message('acme', $1, $2, $3, '{}')`, conv, id, direction); err != nil {
			t.Fatal(err)
		}
		var pk int64
		if err := pool.QueryRow(ctx, `SELECT id FROM ordo.conversations WHERE conversation_id = $1`, conv).Scan(&pk); err != nil {
			t.Fatal(err)
		}
		return pk
	}
	urgent := func(conv int64) bool {
		t.Helper()
		var u bool
		if err := pool.QueryRow(ctx, `SELECT urgent FROM ordo.ready WHERE conversation_pk = $1`, conv).Scan(&u); err != nil {
			t.Fatal(err)
		}
		return u
	}
	caughtUp := func(conv int64) {
		t.Helper()
		if _, err := pool.Exec(ctx, `DELETE FROM ordo.ready WHERE conversation_pk = $1`, conv); err != nil {
			t.Fatal(err)
		}
	}
	numberFree := func() {
		t.Helper()
		if _, err := pool.Exec(ctx, `UPDATE ordo.send_pacing SET sent_until = clock_timestamp()`); err != nil {
			t.Fatal(err)
		}
	}
	// Users alone on a fresh number: the first goes, the second waits
	// about a slot (1/s), for the number, not for a line.
	u1 := enqueue("u1", "in-1", "inbound")
	if !urgent(u1) || urgent(convs[0]) {
		t.Fatal("an inbound message's conversation is not marked urgent, or a campaign's is")
	}
	if v, w := reserve(u1); v != "go" || w != 0 {
		t.Fatalf("first answer on a fresh number: %s %s; want go now", v, w)
	}
	u2 := enqueue("u2", "in-2", "inbound")
	if v, w := reserve(u2); v != "wait" || w < 800*time.Millisecond || w > time.Second {
		t.Fatalf("an answer right after another: %s %s; want a wait of about one slot", v, w)
	}
	// The campaign: ten conversations take the line's slots, out to ~10 s.
	for _, c := range convs {
		if v, w := reserve(c); v != "wait" || w <= 0 {
			t.Fatalf("campaign conversation %d: %s %s; want a wait in line", c, v, w)
		}
	}
	if _, last := reserve(convs[9]); last < 9*time.Second {
		t.Fatalf("the campaign's last slot is %s away; want about 10 s", last)
	}
	// Once the number is free again (its last send a slot ago), a user
	// who writes goes ahead of every campaign slot...
	numberFree()
	u3 := enqueue("u3", "in-3", "inbound")
	if v, w := reserve(u3); v != "go" || w != 0 {
		t.Fatalf("an answer during the campaign: %s %s; want go now, ahead of its line", v, w)
	}
	// ...so does an answer the workflow posts after the user's message was
	// handled (the conversation caught up meanwhile)...
	caughtUp(u3)
	numberFree()
	if enqueue("u3", "out-3", "outbound"); !urgent(u3) {
		t.Fatal("an outbound message moments after the user's is not marked urgent")
	}
	if v, w := reserve(u3); v != "go" || w != 0 {
		t.Fatalf("an answer posted after the user's message: %s %s; want go now", v, w)
	}
	// ...while the campaign's next message waits in line...
	enqueue("c0", "m0-2", "outbound")
	if _, err := pool.Exec(ctx, `UPDATE ordo.conversations SET send_slot_at = NULL WHERE id = $1`, convs[0]); err != nil {
		t.Fatal(err)
	}
	if v, w := reserve(convs[0]); v != "wait" || w < 9*time.Second {
		t.Fatalf("a campaign message: %s %s; want the end of the line", v, w)
	}
	// ...and so does an outbound message an hour after the user's.
	caughtUp(u1)
	if _, err := pool.Exec(ctx, `UPDATE ordo.messages SET created_at = now() - interval '1 hour' WHERE message_id = 'in-1'`); err != nil {
		t.Fatal(err)
	}
	numberFree()
	if enqueue("u1", "out-1", "outbound"); urgent(u1) {
		t.Fatal("an outbound message an hour after the user's is marked urgent")
	}
	if v, w := reserve(u1); v != "wait" || w < 9*time.Second {
		t.Fatalf("an outbound message an hour after the user's: %s %s; want the end of the line", v, w)
	}
}
