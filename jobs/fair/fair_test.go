package fair

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Unix(1e9, 0)

func newModel() *Scheduler {
	return New(Config{Poll: 200 * time.Millisecond, RefreshMin: 20 * time.Millisecond, Slice: 100 * time.Millisecond})
}

// picks runs n picks at now, refreshing with rows whenever the model asks.
func picks(s *Scheduler, now time.Time, rows []Due, n int) []int64 {
	var out []int64
	for range n {
		t, d := s.Pick(now, false)
		if d == Refresh {
			s.Refresh(now, rows)
			t, d = s.Pick(now, true)
		}
		if d != Go {
			out = append(out, 0)
			continue
		}
		out = append(out, t.Tenant)
	}
	return out
}

func due(tenant int64, weight, cap int, in time.Duration) Due {
	return Due{Turn: Turn{Tenant: tenant, Weight: weight, Cap: cap}, DueIn: in}
}

// dueNow is a row of tenant with ready conversations due now.
func dueNow(tenant int64, weight, ready int) Due {
	return Due{Turn: Turn{Tenant: tenant, Weight: weight}, Ready: ready}
}

// servedBeyondRoom: with the room full, a free runner's Take at later
// reads the ready set, which shows tenant 2's conversation due since a
// moment before (its notification lost), and then serves tenant 2 as
// urgent, beyond the room.
func servedBeyondRoom(t *testing.T, s *Scheduler, r *Room, later time.Time) {
	t.Helper()
	if _, _, _, d := Take(s, r, later, 8, 1, false); d != Refresh {
		t.Fatalf("Take after a poll with the room full: %v; want it to read the ready set", d)
	}
	s.Refresh(later, []Due{due(1, 1, 0, 0), due(2, 1, 0, -time.Millisecond)})
	n, turn, urgent, d := Take(s, r, later, 8, 1, true)
	if d != Go || !urgent || turn.Tenant != 2 || n != 1 {
		t.Fatalf("Take = %d %+v urgent %v %v; want tenant 2 served beyond the room", n, turn, urgent, d)
	}
}

func TestModel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, s *Scheduler)
	}{
		{"a round gives each tenant its weight in claims, in tenant order", func(t *testing.T, s *Scheduler) {
			rows := []Due{due(1, 1, 0, 0), due(2, 3, 0, 0)}
			if got := picks(s, t0, rows, 8); !slices.Equal(got, []int64{1, 2, 2, 2, 1, 2, 2, 2}) {
				t.Fatalf("picks %v", got)
			}
		}},
		{"a visit claims no more than the tenant has due", func(t *testing.T, s *Scheduler) {
			// Weight 4, one conversation due: one claim, not four runners
			// claiming for the one conversation a batch took.
			rows := []Due{{Turn: Turn{Tenant: 1, Weight: 4}, Ready: 1}}
			if got := picks(s, t0, rows, 2); !slices.Equal(got, []int64{1, 0}) {
				t.Fatalf("picks %v; want one claim for the one conversation due", got)
			}
		}},
		{"a known tenant's notification puts it in the round without a read", func(t *testing.T, s *Scheduler) {
			s.Refresh(t0, []Due{{Turn: Turn{Tenant: 1, Weight: 1}, Ready: 1}})
			if got := picks(s, t0, nil, 1); got[0] != 1 {
				t.Fatalf("picks %v", got)
			}
			s.PassOn(t0, 1, false)
			later := t0.Add(time.Millisecond) // within RefreshMin: no read due by time
			s.NoteDue(later, 1)
			s.NoteDue(later, 1)
			for i := range 2 {
				if tn, d := s.Pick(later, false); d != Go || tn.Tenant != 1 {
					t.Fatalf("pick %d after two notifications: %+v %v; want tenant 1 without a read", i, tn, d)
				}
			}
			if _, d := s.Pick(later, false); d == Go {
				t.Fatal("a third claim for two notified conversations")
			}
			// A tenant the model does not know: the ready set is read.
			s.NoteDue(later, 2)
			if _, d := s.Pick(later, false); d != Refresh {
				t.Fatalf("pick after an unknown tenant's notification: %v; want a read of the ready set", d)
			}
		}},
		{"a claim that saw more than counted keeps the tenant in the round", func(t *testing.T, s *Scheduler) {
			s.Refresh(t0, []Due{{Turn: Turn{Tenant: 1, Weight: 1}, Ready: 1}})
			picks(s, t0, nil, 1)
			s.PassOn(t0, 1, true) // another was due behind it: a notification merged, or lost
			if tn, d := s.Pick(t0, false); d != Go || tn.Tenant != 1 {
				t.Fatalf("pick after a claim that saw more: %+v %v; want tenant 1", tn, d)
			}
		}},
		{"messages sent on a claim's workers count as visits", func(t *testing.T, s *Scheduler) {
			rows := []Due{due(1, 1, 0, 0), due(2, 1, 0, 0)}
			picks(s, t0, rows, 2) // 1, 2
			s.Sent(1, 3)          // tenant 1's drain sent three more messages
			if got := picks(s, t0, rows, 4); !slices.Equal(got, []int64{2, 2, 2, 1}) {
				t.Fatalf("picks %v; want tenant 2 for the three messages tenant 1 sent, then tenant 1", got)
			}
		}},
		{"when every tenant owes, the one that owes fewest rounds goes", func(t *testing.T, s *Scheduler) {
			rows := []Due{due(1, 1, 0, 0), due(2, 2, 0, 0)}
			picks(s, t0, rows, 1)
			s.Sent(1, 800) // a campaign's batches, round after round
			s.Sent(2, 3)   // a steady tenant's: one round and a half of its weight
			// Both owe a round or more: the skips served the tenant they
			// wrapped round to, the campaign, however much it owed.
			if got := picks(s, t0, rows, 1); got[0] != 2 {
				t.Fatalf("picked %v; want tenant 2, which owes fewer rounds", got)
			}
		}},
		{"a drain that ends with its conversation due now is no reason to read", func(t *testing.T, s *Scheduler) {
			// Its park notifies (ordo.park_conversation, ordo.finish);
			// taking it as due by time read the ready set after each drain.
			s.Refresh(t0, []Due{due(1, 1, 0, 0)})
			picks(s, t0, nil, 1)
			s.DueIn(t0, 0)
			if _, d := s.Pick(t0.Add(time.Millisecond), false); d == Refresh {
				t.Fatal("a read after a drain that ended due now")
			}
			s.DueIn(t0, 5*time.Millisecond) // a send slot ahead: due by time
			if _, d := s.Pick(t0.Add(5*time.Millisecond), false); d != Refresh {
				t.Fatalf("pick once a parked conversation is due: %v; want a read", d)
			}
		}},
		{"idle runners' polls read the ready set once a poll interval", func(t *testing.T, s *Scheduler) {
			s.Refresh(t0, []Due{due(1, 1, 0, s.cfg.Poll)})
			for i := range 3 { // three runners' polls, within one interval of the read
				s.Waited(t0.Add(time.Duration(i+1) * s.cfg.Poll / 4))
				if _, d := s.Pick(t0.Add(time.Duration(i+1)*s.cfg.Poll/4), false); d == Refresh {
					t.Fatalf("poll %d read the ready set again within a poll interval", i+1)
				}
			}
			s.Waited(t0.Add(s.cfg.Poll))
			if _, d := s.Pick(t0.Add(s.cfg.Poll), false); d != Refresh {
				t.Fatalf("pick after a poll interval without a read: %v; want a read", d)
			}
		}},
		{"nothing due: none, and the wait runs to the earliest due time", func(t *testing.T, s *Scheduler) {
			rows := []Due{due(1, 1, 0, 50*time.Millisecond)}
			if got := picks(s, t0, rows, 1); got[0] != 0 {
				t.Fatalf("picked %v with nothing due", got)
			}
			if w := s.Wait(t0); w != 50*time.Millisecond {
				t.Fatalf("wait %s; want the 50ms until the next due time", w)
			}
		}},
		{"a tenant that missed sits out until something is due for it", func(t *testing.T, s *Scheduler) {
			rows := []Due{due(1, 1, 1, 0), due(2, 1, 0, 0)}
			picks(s, t0, rows, 1) // 1
			s.Missed(t0, 1, t0)   // at its cap
			s.NoteDue(t0, 3)      // someone else: a new round, without 1
			if got := picks(s, t0, rows, 3); slices.Contains(got, 1) {
				t.Fatalf("picks %v: the blocked tenant came back before its event", got)
			}
			later := t0.Add(time.Millisecond)
			s.NoteDue(later, 1)
			if got := picks(s, later, rows, 1); got[0] != 1 {
				t.Fatalf("picks %v: want the tenant whose conversation became due", got)
			}
		}},
		{"a conversation that became due while a claim found nothing is not forgotten", func(t *testing.T, s *Scheduler) {
			// A claim for tenant 1 asked at t0 and found nothing; its
			// notification came before the claim's answer was recorded.
			// Blocking the tenant then lost that notification: the runner
			// it woke found the tenant sitting out and waited a poll
			// interval (TestIdleRunnersAreNotAllWokenForOneMessage, CI).
			rows := []Due{due(1, 1, 0, 0)}
			picks(s, t0, rows, 1)
			later := t0.Add(time.Millisecond)
			s.NoteDue(later, 1)
			s.Missed(later.Add(time.Millisecond), 1, t0)
			if got := picks(s, later, rows, 1); got[0] != 1 {
				t.Fatalf("picked %v; want tenant 1, due since the claim was asked", got)
			}
			s.NoteDue(later, 0) // a conversation of a tenant not named
			s.Missed(later.Add(time.Millisecond), 1, t0)
			if got := picks(s, later, rows, 1); got[0] != 1 {
				t.Fatalf("picked %v; want tenant 1 after a notification naming no tenant", got)
			}
		}},
		{"a tenant the ready set shows due, its notification lost, is found waiting within a poll", func(t *testing.T, s *Scheduler) {
			// The room is full; tenant 2's conversation became due at t0+1ms
			// but its notification never came (a listener reconnecting, a
			// starved process): only the ready set says so. Before, Take
			// read nothing and the runners waited for room for as long as
			// the campaign held it (CI: TestTenantWithNothingRunningIsNot…).
			r := Room{Free: 0, Over: 1}
			s.Refresh(t0, []Due{due(1, 1, 0, 0)})
			s.PassOn(t0, 1, true)
			later := t0.Add(s.cfg.Poll)
			servedBeyondRoom(t, s, &r, later)
		}},
		{"a blocked tenant is tried again after a poll interval of waiting", func(t *testing.T, s *Scheduler) {
			// At its cap, with a conversation due for a minute: nothing
			// newly due tries it again.
			rows := []Due{due(1, 1, 1, -time.Minute)}
			picks(s, t0, rows, 1)
			s.Missed(t0, 1, t0)
			if got := picks(s, t0.Add(s.cfg.Poll/2), rows, 1); got[0] != 0 {
				t.Fatalf("picked %v before a poll interval passed", got)
			}
			s.Waited(t0.Add(s.cfg.Poll))
			if got := picks(s, t0.Add(s.cfg.Poll), rows, 1); got[0] != 1 {
				t.Fatalf("picked %v after a wait of a poll interval", got)
			}
		}},
		{"a blocked tenant is tried again after a poll interval with every runner busy", func(t *testing.T, s *Scheduler) {
			// A campaign keeps every runner busy: none waits, so Waited
			// never comes. Tenant 2 (at its cap) missed; after a poll
			// interval the round's read of the ready set tries it again.
			// Before, it sat out until one of its own events, for as long
			// as the campaign kept the runners.
			rows := []Due{due(1, 1, 0, 0), due(2, 1, 1, -time.Minute)}
			picks(s, t0, rows, 2)
			s.Missed(t0, 2, t0)
			s.PassOn(t0, 1, true)
			if got := picks(s, t0.Add(s.cfg.Poll/2), rows, 4); slices.Contains(got, 2) {
				t.Fatalf("picks %v: tenant 2 tried again before a poll interval", got)
			}
			if got := picks(s, t0.Add(s.cfg.Poll), rows, 2); !slices.Contains(got, 2) {
				t.Fatalf("picks %v: tenant 2 still sits out a poll interval after its miss", got)
			}
		}},
		{"a blocked tenant the ready set shows due again, its notification lost, is served with the room full", func(t *testing.T, s *Scheduler) {
			// Tenant 2's claim found nothing (a runner of another process
			// took its conversation). Its next conversation became due, but
			// the notification never came (a listener reconnecting, a
			// starved process): only the ready set says so. With a campaign
			// holding the room and no runner waiting, it sat out until
			// the campaign ended.
			r := Room{Free: 0, Over: 1}
			s.Refresh(t0, []Due{due(1, 1, 0, 0), due(2, 1, 0, 0)})
			s.PassOn(t0, 1, true)
			s.Missed(t0, 2, t0)
			s.Refresh(t0.Add(s.cfg.Slice), []Due{due(1, 1, 0, 0)}) // its conversation went
			later := t0.Add(s.cfg.Slice + s.cfg.Poll)
			servedBeyondRoom(t, s, &r, later)
		}},
		{"a round ends after its last visit and the next one reads who is due", func(t *testing.T, s *Scheduler) {
			// Tenant 1's campaign always has more; tenant 2 has a drain
			// running here (so it is not urgent) and another conversation
			// due. Before, the round wrapped to its start right after its
			// last visit and was never read again while tenant 1 stayed
			// in it: tenant 2 got no claim for as long as its drain ran
			// (1 s here, every pick tenant 1's).
			rows := []Due{due(1, 1, 0, 0)}
			picks(s, t0, rows, 1)
			s.PassOn(t0, 1, true)
			s.PassOn(t0, 2, true)
			rows = append(rows, due(2, 1, 0, 0))
			later := t0.Add(s.cfg.RefreshMin)
			s.NoteDue(later, 2)
			if got := picks(s, later, rows, 2); !slices.Contains(got, 2) {
				t.Fatalf("picks %v: tenant 2, due since the round's read, was left out of the next round", got)
			}
		}},
		{"a read in the middle of a round leaves the round where it was", func(t *testing.T, s *Scheduler) {
			rows := []Due{due(1, 1, 0, 0), due(2, 1, 0, 0), due(3, 1, 0, 0)}
			picks(s, t0, rows, 1) // 1
			s.Refresh(t0, append(rows, due(9, 1, 0, 0)))
			if got := picks(s, t0, rows, 2); !slices.Equal(got, []int64{2, 3}) {
				t.Fatalf("picks %v after a mid-round read; want the round to go on with 2, 3", got)
			}
		}},
		{"a waiting tenant with nothing running is urgent, once idle a slice", func(t *testing.T, s *Scheduler) {
			rows := []Due{due(1, 1, 0, 0), due(2, 1, 0, 0)}
			picks(s, t0, rows, 1)
			s.PassOn(t0, 2, true)
			s.Released(t0, 2, false) // its drain here just ended
			now := t0.Add(10 * time.Millisecond)
			s.NoteDue(now, 2)
			if _, _, d := s.Urgent(now, false); d == Go {
				t.Fatal("a tenant whose drain ended 10ms ago is urgent; it had its turn")
			}
			later := t0.Add(150 * time.Millisecond)
			s.NoteDue(later, 2)
			tn, _, d := s.Urgent(later, false)
			if d != Go || tn.Tenant != 2 {
				t.Fatalf("urgent %v %v; want tenant 2, idle for a slice and waiting", tn, d)
			}
			if s.WaitingTenant(2) {
				t.Fatal("still waiting after its urgent pick")
			}
		}},
		{"an unknown urgent tenant asks for a read first", func(t *testing.T, s *Scheduler) {
			s.NoteDue(t0, 7)
			if _, _, d := s.Urgent(t0, false); d != Refresh {
				t.Fatalf("decision %v; want Refresh for a tenant whose weight and cap are unknown", d)
			}
			s.Refresh(t0, []Due{due(7, 2, 3, 0)})
			if tn, _, d := s.Urgent(t0, true); d != Go || tn != (Turn{Tenant: 7, Weight: 2, Cap: 3}) {
				t.Fatalf("urgent %v %v", tn, d)
			}
		}},
		{"served out of turn, a tenant skips as many visits of the round", func(t *testing.T, s *Scheduler) {
			rows := []Due{due(1, 1, 0, 0), due(2, 1, 0, 0)}
			s.Refresh(t0, rows)
			s.NoteDue(t0, 2)
			if tn, _, d := s.Urgent(t0, false); d != Go || tn.Tenant != 2 {
				t.Fatalf("urgent %v %v", tn, d)
			}
			if got := picks(s, t0, rows, 3); !slices.Equal(got, []int64{1, 1, 2}) {
				t.Fatalf("picks %v; want 2's first visit skipped", got)
			}
		}},
		{"a batch counts as many visits as it took conversations", func(t *testing.T, s *Scheduler) {
			rows := []Due{due(1, 1, 0, 0), due(2, 1, 0, 0)}
			picks(s, t0, rows, 1) // 1, whose claim takes a batch of 3
			s.Took(1, 3)
			if got := picks(s, t0, rows, 4); !slices.Equal(got, []int64{2, 2, 2, 1}) {
				t.Fatalf("picks %v; want 1's next two visits skipped", got)
			}
		}},
		{"a hand-off is a claim out of turn, as an urgent pick", func(t *testing.T, s *Scheduler) {
			rows := []Due{due(1, 1, 0, 0), due(2, 1, 0, 0), due(3, 1, 0, 0)}
			picks(s, t0, rows, 2) // 1, 2
			s.PassOn(t0, 1, true)
			s.PassOn(t0, 2, true)
			now := t0.Add(time.Second)
			s.NoteDue(now, 3)
			if !s.HandOff(now, 1) {
				t.Fatal("no hand-off to tenant 3, waiting with nothing running")
			}
			if got := picks(s, now, rows, 4); !slices.Equal(got, []int64{3, 1, 2, 3}) {
				t.Fatalf("picks %v; want 3 handed the worker, then its visit of the round skipped", got)
			}
		}},
		{"a tenant out of a new round owes it no visits", func(t *testing.T, s *Scheduler) {
			// A quiet tenant served out of turn three times, then a
			// backlog: it goes at its first visit.
			long := -time.Minute // due long ago: no one waits for a worker
			s.Refresh(t0, []Due{due(1, 1, 0, long), due(2, 1, 0, long), due(7, 1, 0, 0)})
			for i := range 3 {
				at := t0.Add(time.Duration(i+1) * time.Second)
				s.NoteDue(at, 7)
				if tn, _, d := s.Urgent(at, false); d != Go || tn.Tenant != 7 {
					t.Fatalf("urgent %v %v; want 7", tn, d)
				}
			}
			later := t0.Add(time.Minute)
			s.RefreshFailed() // the round is over
			s.Refresh(later, []Due{due(1, 1, 0, long), due(2, 1, 0, long)})
			s.RefreshFailed()
			rows := []Due{due(1, 1, 0, long), due(2, 1, 0, long), due(7, 1, 0, long)}
			s.Refresh(later, rows)
			if got := picks(s, later, rows, 3); !slices.Equal(got, []int64{1, 2, 7}) {
				t.Fatalf("picks %v; want 7 at its first visit of a round after one without it", got)
			}
		}},
		{"a round of one tenant served out of turn still picks it", func(t *testing.T, s *Scheduler) {
			rows := []Due{due(1, 1, 0, 0)}
			s.Refresh(t0, rows)
			s.NoteDue(t0, 1)
			if _, _, d := s.Urgent(t0, false); d != Go {
				t.Fatalf("urgent: %v", d)
			}
			if got := picks(s, t0, rows, 2); !slices.Equal(got, []int64{1, 1}) {
				t.Fatalf("picks %v; want the round's only tenant", got)
			}
		}},
		{"a drain hands its worker only to a tenant with nothing running", func(t *testing.T, s *Scheduler) {
			rows := []Due{due(1, 1, 0, 0), due(2, 1, 0, 0), due(3, 1, 0, 0)}
			picks(s, t0, rows, 2)
			s.PassOn(t0, 1, true)
			s.PassOn(t0, 2, true)
			now := t0.Add(time.Second)
			s.NoteDue(now, 2) // a campaign's conversation, with a drain running
			if s.HandOff(now, 1) {
				t.Fatal("a drain stopped for a tenant that has a drain running")
			}
			s.NoteDue(now, 3)
			if !s.HandOff(now, 1) {
				t.Fatal("no hand-off to the idle tenant that waits")
			}
			if got := picks(s, now, rows, 1); got[0] != 3 {
				t.Fatalf("picked %v after the hand-off; want 3", got)
			}
		}},
		{"a drain goes on within its limits, past its slice until a tenant with nothing running waits", func(t *testing.T, s *Scheduler) {
			rows := []Due{due(1, 1, 0, 0), due(2, 1, 0, 0), due(3, 1, 0, 0)}
			picks(s, t0, rows, 2)
			s.PassOn(t0, 1, true)
			s.PassOn(t0, 2, true)
			l := RunLimits{Rounds: 10, Time: time.Second}
			for _, c := range []struct {
				at   time.Duration
				next int
				want bool
			}{
				{50 * time.Millisecond, 3, true},    // within its turn
				{50 * time.Millisecond, 10, false},  // its messages used up
				{1100 * time.Millisecond, 4, false}, // its time used up
				{500 * time.Millisecond, 4, true},   // past its turn, no one waits
			} {
				if got := s.DrainGoesOn(t0.Add(c.at), 1, t0, c.next, l); got != c.want {
					t.Fatalf("at %s, message %d: goes on %v, want %v", c.at, c.next, got, c.want)
				}
			}
			now := t0.Add(500 * time.Millisecond)
			s.NoteDue(now, 2) // a campaign with a drain running: gets its share through the round
			if !s.DrainGoesOn(now, 1, t0, 4, l) {
				t.Fatal("a drain stopped for a tenant that has a drain running")
			}
			s.NoteDue(now, 3)
			if s.DrainGoesOn(now.Add(10*time.Millisecond), 1, t0, 4, l) {
				t.Fatal("a drain past its turn went on while an idle tenant waited")
			}
			if got := picks(s, now, rows, 1); got[0] != 3 {
				t.Fatalf("picked %v after the drain stopped; want 3, its worker promised", got)
			}
		}},
		{"a free runner wants half a batch for a slice while batches leave a backlog", func(t *testing.T, s *Scheduler) {
			type want struct {
				n     int
				later time.Duration
			}
			ask := func(now, since time.Time) want {
				n, later := s.Want(now, since, 8)
				return want{n, later}
			}
			if got := ask(t0, t0); got != (want{1, 0}) {
				t.Fatalf("no backlog yet: %v; want one", got)
			}
			b := &Batch{Tenant: 1, Most: 8, Own: 8}
			s.StartBatch(t0, b, false)
			if got := ask(t0, t0); got != (want{1, 0}) {
				t.Fatalf("a full batch that left nothing behind: %v; want one", got)
			}
			s.StartBatch(t0, b, true)
			for _, c := range []struct {
				since, now time.Duration
				want       want
			}{
				{0, 0, want{4, 100 * time.Millisecond}},                                          // a slice to gather
				{0, 60 * time.Millisecond, want{4, 40 * time.Millisecond}},                       // what is left of it
				{0, 100 * time.Millisecond, want{1, 0}},                                          // looked a slice: takes one
				{950 * time.Millisecond, 950 * time.Millisecond, want{4, 50 * time.Millisecond}}, // the backlog's second ends first
				{time.Second, time.Second, want{1, 0}},                                           // the backlog is old news
			} {
				if got := ask(t0.Add(c.now), t0.Add(c.since)); got != c.want {
					t.Fatalf("looking since %s, at %s: %v; want %v", c.since, c.now, got, c.want)
				}
			}
		}},
		{"a tenant alone whose batch gathers sits out; back when it stops", func(t *testing.T, s *Scheduler) {
			rows := []Due{dueNow(1, 1, 1)}
			picks(s, t0, rows, 1)
			s.PassOn(t0, 1, true)
			if !s.Alone(t0, 1) {
				t.Fatal("tenant 1 is the only one due, yet not alone")
			}
			since, _ := s.Gather(t0, 1, true, time.Time{})
			s.NoteDue(t0, 1) // its next conversation: for the batch's refill
			if got := picks(s, t0, rows, 2); !slices.Equal(got, []int64{0, 0}) {
				t.Fatalf("picks %v while its batch gathers; want none", got)
			}
			if w := s.Wait(t0); w != 100*time.Millisecond {
				t.Fatalf("wait %s; want the round's slice", w)
			}
			next := t0.Add(10 * time.Millisecond) // the batch's next round
			since, _ = s.Gather(next, 1, true, since)
			s.Gather(next, 1, false, since)
			if got := picks(s, next, rows, 1); got[0] != 1 {
				t.Fatalf("picks %v after its batch stopped gathering; want 1", got)
			}
		}},
		{"a gathering round that outlasts its slice lets claims go to the tenant", func(t *testing.T, s *Scheduler) {
			// A send that hangs must not hold the tenant's other
			// conversations for the whole send timeout.
			rows := []Due{dueNow(1, 1, 1)}
			picks(s, t0, rows, 1)
			s.PassOn(t0, 1, true)
			s.Gather(t0, 1, true, time.Time{})
			late := t0.Add(100 * time.Millisecond)
			if got := picks(s, late, rows, 1); got[0] != 1 {
				t.Fatalf("picks %v a slice into a gathering round; want 1", got)
			}
		}},
		{"a gathering round past its slice does not shorten a runner's wait", func(t *testing.T, s *Scheduler) {
			// The round's send hangs and nothing else is due: a runner
			// with nothing to claim waits its poll, not a millisecond at
			// a time until the send returns.
			picks(s, t0, []Due{due(1, 1, 0, 0)}, 1)
			s.PassOn(t0, 1, false)
			s.Gather(t0, 1, true, time.Time{})
			if w := s.Wait(t0.Add(40 * time.Millisecond)); w != 60*time.Millisecond {
				t.Fatalf("wait %s 40ms into the gathering round; want the 60ms left of its slice", w)
			}
			s.Refresh(t0.Add(time.Second), nil)
			if w := s.Wait(t0.Add(time.Second)); w != s.cfg.Poll {
				t.Fatalf("wait %s a second into the gathering round; want the poll interval", w)
			}
		}},
		{"with another tenant due, no tenant is alone, and the round goes by weight", func(t *testing.T, s *Scheduler) {
			rows := []Due{due(1, 3, 0, 0), due(2, 1, 0, 0)}
			picks(s, t0, rows, 1)
			if s.Alone(t0, 1) || s.Alone(t0, 2) {
				t.Fatal("two tenants due, yet one is alone: its batch would refill past the other's turn")
			}
			s.Missed(t0, 2, t0) // 2 had nothing after all: 1 is alone again
			if !s.Alone(t0, 1) {
				t.Fatal("the other tenant sits out a miss, yet 1 is not alone")
			}
			s.NoteDue(t0.Add(time.Millisecond), 2)
			if s.Alone(t0.Add(time.Millisecond), 1) {
				t.Fatal("tenant 2 waits for a worker, yet 1 is alone")
			}
		}},
		{"a batch whose round hung holds its tenant out for a slice, whatever its other batches do", func(t *testing.T, s *Scheduler) {
			// Batch A's send hangs; batch B gathers now and then. With the
			// tenant's latest round start counted for all its batches, A
			// held the tenant out of the round whenever B gathered, and
			// its due conversations waited up to 3 s with every runner
			// idle (sim_gather_test.go, seed 10).
			rows := []Due{dueNow(1, 1, 1)}
			picks(s, t0, rows, 1)
			s.PassOn(t0, 1, true)
			s.Gather(t0, 1, true, time.Time{}) // A: its round hangs
			b1 := t0.Add(90 * time.Millisecond)
			since, _ := s.Gather(b1, 1, true, time.Time{}) // B gathers
			b2 := t0.Add(120 * time.Millisecond)
			if _, w := s.Gather(b2, 1, false, since); w != WakeOne { // B is full: it stops
				t.Fatalf("B's stop wakes %v; want a runner, A's round being past its slice", w)
			}
			s.NoteDue(b2, 1)
			if s.Gathering(b2, 1) {
				t.Fatal("a slice past A's hung round and B stopped, yet the tenant still sits out")
			}
			if got := picks(s, b2, rows, 1); got[0] != 1 {
				t.Fatalf("picks %v; want tenant 1, which no batch gathers within its slice", got)
			}
		}},
		{"who an event wakes", func(t *testing.T, s *Scheduler) {
			// The shell (jobs.scheduler.wake) and the simulation carry these
			// out alike: the model decides.
			picks(s, t0, []Due{dueNow(1, 1, 3)}, 1)
			if w := s.NoteDue(t0, 2); w != WakeOne {
				t.Fatalf("a notification wakes %v; want one runner, or the next that would wait", w)
			}
			if w := s.PassOn(t0, 1, true); w != WakeWaiting {
				t.Fatalf("a claim with more behind it wakes %v; want a waiting runner", w)
			}
			if w := s.PassOn(t0, 1, false); w != WakeNone {
				t.Fatalf("a claim with nothing behind it wakes %v; want none", w)
			}
			since, w := s.Gather(t0, 1, true, time.Time{})
			if w != WakeNone {
				t.Fatalf("a batch that starts gathering wakes %v; want none", w)
			}
			if w := s.PassOn(t0, 1, true); w != WakeNone {
				t.Fatalf("a claim with more behind it wakes %v while a batch gathers them; want none", w)
			}
			if _, w := s.Gather(t0, 1, false, since); w != WakeOne {
				t.Fatalf("the last gathering batch's stop wakes %v; want one runner for what it left", w)
			}
			if w := s.Released(t0, 1, false); w != WakeNone {
				t.Fatalf("a release wakes %v; want none (its runner claims again)", w)
			}
			if w := s.Released(t0, 1, true); w != WakeOne {
				t.Fatalf("a capped release wakes %v; want one runner for the freed slot", w)
			}
		}},
		{"a gathering tenant's visits go to the others of the round", func(t *testing.T, s *Scheduler) {
			rows := []Due{dueNow(1, 2, 2), due(2, 1, 0, 0)}
			picks(s, t0, rows, 1)
			s.Gather(t0, 1, true, time.Time{})
			if got := picks(s, t0, rows, 3); !slices.Equal(got, []int64{2, 2, 2}) {
				t.Fatalf("picks %v; want only tenant 2 while 1 gathers", got)
			}
		}},
		{"of two batches of a tenant gathering, the smaller half yields its room", func(t *testing.T, s *Scheduler) {
			s.Gather(t0, 1, true, time.Time{})
			if s.Merge(1, 1, 8) {
				t.Fatal("a lone gathering batch asked to yield")
			}
			s.Gather(t0, 1, true, time.Time{}) // a second batch of tenant 1
			if !s.Merge(1, 3, 8) || !s.Merge(1, 4, 8) {
				t.Fatal("a batch of half or less beside another did not yield")
			}
			if s.Merge(1, 5, 8) {
				t.Fatal("the larger batch yielded too")
			}
			if s.Merge(2, 1, 8) {
				t.Fatal("another tenant's batch yielded")
			}
		}},
		{"take: room first, then one beyond it per overdraft for urgent tenants", func(t *testing.T, s *Scheduler) {
			s.Refresh(t0, []Due{due(1, 1, 0, 0), due(2, 1, 0, 0), due(3, 1, 0, 0)})
			r := Room{Free: 2, Over: 1}
			if n, _, urgent, d := Take(s, &r, t0, 8, 1, false); n != 2 || urgent || d != Go {
				t.Fatalf("take %d %v %v; want the room's 2", n, urgent, d)
			}
			s.NoteDue(t0, 2)
			s.NoteDue(t0, 3)
			n, tn, urgent, d := Take(s, &r, t0, 8, 1, false)
			if n != 1 || !urgent || d != Go || tn.Tenant != 2 {
				t.Fatalf("take %d %v %v %v; want the overdraft for tenant 2", n, tn, urgent, d)
			}
			if n, _, _, d := Take(s, &r, t0, 8, 1, false); n != 0 || d != None {
				t.Fatalf("take %d %v beyond the overdraft", n, d)
			}
			if !s.WaitingTenant(3) {
				t.Fatal("tenant 3 lost its place when no room could be had (unpick)")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newModel())
		})
	}
}
