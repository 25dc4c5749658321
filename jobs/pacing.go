package jobs

import (
	"context"
	"time"
)

// Pacing keeps a tenant's sends inside Meta's limits across every worker
// process, with Postgres as the only shared state (ordo.reserve_send, which
// ordo.start_step calls before it records a send attempt: run.start):
//
//   - throughput per phone number: ordo.send_pacing holds the number's next
//     free send slot; one atomic upsert hands out a slot and moves it on by
//     1/send_rate. The slot is kept on the conversation (send_slot_at) until
//     it comes: a drain sleeps until it when it is near (PaceMaxSleep) and
//     otherwise snoozes until then, and either way gets that same slot
//     back, so it never polls and never loses its place. A slot is a place
//     in line, not a licence: the number's sends so far (sent_until) space
//     every send 1/send_rate apart with 50 ms of tolerance, so a slot
//     redeemed late (a stalled process, a late claim) takes the number's
//     next slot rather than leaving at Meta in one instant with the on-time
//     slots after it (and each send it holds back gets a slot of its own,
//     so they come back one by one, not together to ask again);
//   - pair rate: a conversation is one user, so the minimum gap between two
//     sends to a user is the conversation's pair_ready_at (set from each
//     send's answer when the tenant has a pair gap, and from each 131056
//     error's record by Meta's 4^X schedule), waited for before a number
//     slot is taken (a user's gap never holds up the number). It is checked
//     where every send starts, so no path that starts one early — a claim
//     on a stale read, a wake-up that cut the drain's park short — gets
//     past Meta's pair-rate advice;
//   - a throttled number (Meta's 130429, 4, 80007) gets its next slot pushed
//     out by the retry delay, slots already handed out inside that window are
//     given up, so every conversation of the number slows down (slowNumber);
//   - a paused tenant's drains do not send at all.

// slowNumber pushes the phone number's next slot (and with it every
// conversation of the number) out by $2 after Meta said it is over its
// limits; slots handed out earlier that fall inside the window are
// re-reserved (ordo.reserve_send compares them with throttled_until).
const slowNumber = `
INSERT INTO ordo.send_pacing AS p (phone_number_id, next_slot, throttled_until)
VALUES ($1, clock_timestamp() + $2::interval, clock_timestamp() + $2::interval)
ON CONFLICT (phone_number_id) DO UPDATE SET
    next_slot       = greatest(p.next_slot, excluded.next_slot),
    throttled_until = greatest(p.throttled_until, excluded.throttled_until)`

// pairRateDelay is Meta's advice for 131056: retry after 4^X seconds, X
// counting from 0 over the step's consecutive pair-rate errors; unit stands
// for the second so tests can run the schedule fast. Capped at an hour.
func pairRateDelay(consecutive int, unit time.Duration) time.Duration {
	d := unit
	for i := 1; i < consecutive; i++ {
		d *= 4
		if d >= time.Hour {
			return time.Hour
		}
	}
	return min(d, time.Hour)
}

// pairRateSchedule is pairRateDelay for 1, 2, … consecutive errors, up to
// its cap (the last entry stands for every run longer than the schedule):
// the model handed to the failure's record (recordFailure), which picks the
// entry for the step's run of errors, a count that lives in the step row.
func pairRateSchedule(unit time.Duration) []time.Duration {
	var s []time.Duration
	for n := 1; ; n++ {
		d := pairRateDelay(n, unit)
		s = append(s, d)
		if d >= time.Hour || d <= 0 {
			return s
		}
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
