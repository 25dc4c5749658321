package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/tenants"
	"github.com/ordo-dev/ordo/web"
)

// The end users of the lock-cycle tests, in the lock order (a < c < d).
const (
	cycleA = "16505550401"
	cycleC = "16505550403"
	cycleD = "16505550404"
)

// cycleScene is a tenant with mark_read on, whose conversations a, c and d
// exist (one delivered message each), an application's transaction on a
// connection of its own that holds c (its own ordo.enqueue_message of
// app-c, not committed), and the delivery the tests send: a's a-1, c's
// c-1, c-2 and the image c-3 (media id media-c3), d's d-1, shuffled, each
// conversation's in timestamp order only once sorted, and the status of a
// billable message (not ordo's: its pricing is recorded all the same).
type cycleScene struct {
	e      *waEnv
	at     time.Time // c-1's timestamp; c-2 and c-3 follow a second apart
	app    pgx.Tx
	appPID int
	body   []byte
}

func newCycleScene(t *testing.T) *cycleScene {
	t.Helper()
	ctx := context.Background()
	e := waStart(t, jobstest.Options{NoStart: true}, web.Config{})
	on := true
	if _, err := e.Tenants.Update(ctx, "acme", tenants.UpdateParams{MarkRead: &on}); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Minute).Truncate(time.Second)
	for _, u := range []string{cycleA, cycleC, cycleD} {
		e.deliverSigned(t, cycleDelivery(nil, cycleText(u, "wamid."+u+"-0", at.Add(-10*time.Second))))
	}
	conn, err := pgx.Connect(ctx, e.Bundle.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	s := &cycleScene{e: e, at: at}
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&s.appPID); err != nil {
		t.Fatal(err)
	}
	// The application's deadlock check runs after 20 ms instead of a
	// second: a lock cycle that lasts longer fails it.
	if _, err := conn.Exec(ctx, `SET deadlock_timeout = '20ms'`); err != nil {
		t.Fatal(err)
	}
	if s.app, err = conn.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.app.Rollback(context.Background()) })
	if _, err := s.app.Exec(ctx, `SELECT ordo.enqueue_message('acme', $1, 'app-c', 'inbound', '{}')`, cycleC); err != nil {
		t.Fatal(err)
	}
	image := cycleText(cycleC, "wamid.c-3", at.Add(2*time.Second))
	image["type"] = "image"
	delete(image, "text")
	image["image"] = map[string]any{"id": "media-c3", "mime_type": "image/jpeg", "sha256": "x"}
	s.body = cycleDelivery(
		[]map[string]any{priced("wamid.sent-1", "sent", "utility", true)},
		image,
		cycleText(cycleC, "wamid.c-1", at),
		cycleText(cycleD, "wamid.d-1", at),
		cycleText(cycleA, "wamid.a-1", at),
		cycleText(cycleC, "wamid.c-2", at.Add(time.Second)),
	)
	return s
}

// cycleText is an inbound text message in Meta's shape.
func cycleText(from, wamid string, at time.Time) map[string]any {
	return map[string]any{"from": from, "id": wamid, "timestamp": strconv.FormatInt(at.Unix(), 10), "type": "text",
		"text": map[string]string{"body": "hi"}}
}

// cycleDelivery is one webhook delivery of statuses and msgs to the test
// tenant's number.
func cycleDelivery(statuses []map[string]any, msgs ...map[string]any) []byte {
	var contacts []any
	for _, m := range msgs {
		contacts = append(contacts, map[string]any{"wa_id": m["from"], "profile": map[string]string{"name": "U"}})
	}
	value := map[string]any{"messaging_product": "whatsapp",
		"metadata": map[string]string{"phone_number_id": jobstest.PhoneNumberID},
		"contacts": contacts, "messages": msgs}
	if len(statuses) > 0 {
		value["statuses"] = statuses
	}
	body, _ := json.Marshal(map[string]any{"object": "whatsapp_business_account", "entry": []any{map[string]any{"id": "WABA", "changes": []any{
		map[string]any{"field": "messages", "value": value}}}}})
	return body
}

// deliver sends the scene's delivery, signed, and returns Meta's answer.
func (s *cycleScene) deliver(t *testing.T) (int, string) {
	return s.e.deliver(t, "acme", s.body, whatsapp.Sign(waAppSecret, s.body))
}

// stored returns how many times each of the delivery's messages is stored.
func (s *cycleScene) stored(t *testing.T, ids ...string) []int {
	t.Helper()
	var n []int
	for _, id := range ids {
		n = append(n, s.e.Count(`SELECT count(*) FROM ordo.messages WHERE message_id = $1`, id))
	}
	return n
}

// check asserts what a user sees once every message of the delivery is
// in: each stored once, each conversation's in timestamp order after what
// was there before (the application's app-c included), each new one's
// read receipt pending and c's image's media id recorded once, and each
// conversation's service window stamped with its latest message. appA
// are the application's messages to a, after the delivery's.
func (s *cycleScene) check(t *testing.T, appA ...string) {
	t.Helper()
	ctx := context.Background()
	want := map[string][]string{
		cycleA: append([]string{"wamid." + cycleA + "-0", "wamid.a-1"}, appA...),
		cycleC: {"wamid." + cycleC + "-0", "app-c", "wamid.c-1", "wamid.c-2", "wamid.c-3"},
		cycleD: {"wamid." + cycleD + "-0", "wamid.d-1"},
	}
	latest := map[string]time.Time{cycleA: s.at, cycleC: s.at.Add(2 * time.Second), cycleD: s.at}
	for conv, ids := range want {
		rows, err := s.e.Pool.Query(ctx, `
SELECT m.message_id FROM ordo.messages m JOIN ordo.conversations c ON c.id = m.conversation_pk
WHERE c.conversation_id = $1 ORDER BY m.seq`, conv)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(ids) {
			t.Fatalf("conversation %s holds %v in seq order, want %v", conv, got, ids)
		}
		for i := range got {
			if got[i] != ids[i] {
				t.Fatalf("conversation %s holds %v in seq order, want %v", conv, got, ids)
			}
		}
		var stamp time.Time
		if err := s.e.Pool.QueryRow(ctx, `SELECT last_inbound_at FROM ordo.conversations WHERE conversation_id = $1`, conv).Scan(&stamp); err != nil {
			t.Fatal(err)
		}
		if !stamp.Equal(latest[conv]) {
			t.Errorf("conversation %s's service window stamped %s, want its latest message's %s", conv, stamp, latest[conv])
		}
	}
	if n := s.e.Count(`SELECT count(*) FROM ordo.messages WHERE message_id LIKE 'wamid.%' AND read_receipt IS DISTINCT FROM 'pending'`); n != 0 {
		t.Errorf("%d delivered messages without a pending read receipt", n)
	}
	if n := s.e.Count(`SELECT count(*) FROM ordo.media WHERE media_id = 'media-c3' AND message_id = 'wamid.c-3'`); n != 1 {
		t.Errorf("c-3's media id recorded %d times, want once", n)
	}
	if n := s.e.Count(`SELECT count(*) FROM ordo.usage WHERE wamid = 'wamid.sent-1' AND billable`); n != 1 {
		t.Errorf("the status's pricing recorded %d times, want once", n)
	}
	if n := s.e.Count(`
SELECT count(*) FROM ordo.conversations c
WHERE c.last_seq <> (SELECT count(*) FROM ordo.messages m WHERE m.conversation_pk = c.id)`); n != 0 {
		t.Errorf("%d conversations with gaps in their seqs", n)
	}
}

// A delivery of a, c and d's messages while an application's transaction
// holds c and then asks for a. A delivery that took a and waited for c
// was a lock cycle with the application until its LockTimeout, in which
// the application's deadlock check cancelled it ("deadlock detected").
// The delivery now waits for its first conversation alone: c's messages
// go in a transaction of their own once the rest committed, which waits
// for c holding nothing. The answer is 200 once all of them committed, or
// 503 (c still held past LockTimeout: Meta redelivers) with a's and d's
// stored and none of c's; the redelivery then stores c's and dedupes the
// rest.
func TestWhatsAppDeliveryHoldsNoConversationWhileItWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newCycleScene(t)
	type answer struct {
		status int
		body   string
	}
	answered := make(chan answer, 1)
	go func() {
		status, body := s.deliver(t)
		answered <- answer{status, body}
	}()
	s.e.WaitFor("the delivery to wait for the application's conversation c", 20*time.Second, func() bool {
		return s.e.Count(`SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))`, s.appPID) > 0
	})
	if _, err := s.app.Exec(ctx, `SELECT ordo.enqueue_message('acme', $1, 'app-a', 'inbound', '{}')`, cycleA); err != nil {
		t.Fatalf("the application's enqueue to a, its second conversation: %v; want it stored (it may wait for the delivery's commit, never be cancelled)", err)
	}
	if err := s.app.Commit(ctx); err != nil {
		t.Fatalf("the application's commit: %v", err)
	}
	a := <-answered
	switch a.status {
	case http.StatusOK:
		var got waAnswer
		if err := json.Unmarshal([]byte(a.body), &got); err != nil || got.Accepted != 5 || got.Duplicates != 0 {
			t.Fatalf("delivery answered 200 %s; want 5 accepted", a.body)
		}
	case http.StatusServiceUnavailable:
		// c's row stayed held past LockTimeout (a busy machine): a's and d's
		// are in, none of c's.
		t.Logf("delivery answered 503 (c held past LockTimeout); redelivering")
		if n := s.stored(t, "wamid.a-1", "wamid.d-1", "wamid.c-1", "wamid.c-2", "wamid.c-3"); n[0] != 1 || n[1] != 1 || n[2]+n[3]+n[4] != 0 {
			t.Fatalf("delivery answered 503; a-1, d-1, c-1, c-2, c-3 stored %v times; want a's and d's once, none of c's", n)
		}
		if got := s.e.deliverSigned(t, s.body); got.Accepted != 3 || got.Duplicates != 2 {
			t.Fatalf("redelivery answered %+v; want c's 3 accepted, a's and d's duplicates", got)
		}
	default:
		t.Fatalf("delivery answered %d %s; want 200, or 503 for Meta to redeliver", a.status, a.body)
	}
	s.check(t, "app-a")
}

// An application holds c for longer than LockTimeout while the delivery
// comes: a's and d's messages are stored, with their service window and
// read receipts, without waiting for c; the delivery answers 503 with
// nothing of c's stored; Meta's redelivery, once the application
// committed, stores c's in order and answers a's and d's as duplicates.
func TestWhatsAppDeliveryLeavesAHeldConversationBehind(t *testing.T) {
	t.Parallel()
	s := newCycleScene(t)
	status, body := s.deliver(t)
	if status != http.StatusServiceUnavailable {
		t.Fatalf("delivery answered %d %s while an application held c; want 503 for Meta to redeliver", status, body)
	}
	if n := s.stored(t, "wamid.a-1", "wamid.d-1", "wamid.c-1", "wamid.c-2", "wamid.c-3"); n[0] != 1 || n[1] != 1 || n[2]+n[3]+n[4] != 0 {
		t.Fatalf("a-1, d-1, c-1, c-2, c-3 stored %v times; want a's and d's once, none of c's", n)
	}
	if n := s.e.Count(`SELECT count(*) FROM ordo.media`); n != 0 {
		t.Fatalf("%d media ids recorded; want none of c's", n)
	}
	if n := s.e.Count(`SELECT count(*) FROM ordo.usage WHERE wamid = 'wamid.sent-1'`); n != 1 {
		t.Fatalf("the status's pricing recorded %d times; want once, with a's and d's messages", n)
	}
	if err := s.app.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.e.deliverSigned(t, s.body); got.Accepted != 3 || got.Duplicates != 2 {
		t.Fatalf("redelivery answered %+v; want c's 3 accepted, a's and d's duplicates", got)
	}
	s.check(t)
}
