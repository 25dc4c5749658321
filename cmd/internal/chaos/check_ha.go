package chaos

// The failover faults' check (--ha): how long each one stopped ordo from
// accepting and from sending, read from the clients' 2xx answers and the
// provider's deliveries — not from ordo — against haRecoverBound. Every
// other check (nothing lost, order, duplicates) judges an HA run as it
// judges any run.

import (
	"fmt"
	"slices"
	"time"
)

// haRecovery is one failover fault's effect, as the checker measured it.
type haRecovery struct {
	fault haFault
	// writePause is the longest time without a 2xx answer from the fault
	// until the cluster was healthy again and 10 s more (longestPause);
	// firstAccept is from the fault to the first 2xx of a
	// request sent after it.
	writePause, firstAccept time.Duration
	// sendPause is the same as writePause for the provider's deliveries;
	// firstSend is from the fault to the first delivery after it.
	sendPause, firstSend time.Duration
	// wrote, sent: something was accepted, and sent, after the fault.
	wrote, sent bool
}

// haRecoveryTail is how long after the cluster is healthy again a
// failover's window lasts: ordo may reconnect a moment later.
const haRecoveryTail = 10 * time.Second

// measureFailover measures one failover fault from the clients' 2xx
// answers and the provider's deliveries; next is when the next failover
// was injected (zero: none), where this one's window ends at the latest.
// refusing are the spans in which the provider refused every send on
// purpose (a Cloud API outage, and the numbers' probe after it): no
// delivery can happen then, so they do not count in the sends' pause.
func measureFailover(f haFault, next time.Time, acks []chaosAck, sends []chaosSend, refusing []exclusiveSpan) haRecovery {
	rec := haRecovery{fault: f}
	end := f.at.Add(haRecoverBound + haRecoveryTail)
	if f.healthy > 0 {
		end = f.at.Add(f.healthy + haRecoveryTail)
	}
	// Before the next failover, whose pause is its own: the window's end,
	// and a last event there.
	in := func(t time.Time) bool { return t.After(f.at) && (next.IsZero() || t.Before(next)) }
	var answered, delivered []time.Time
	if !next.IsZero() {
		if next.Before(end) {
			end = next
		}
		answered, delivered = []time.Time{next}, []time.Time{next}
	}
	for _, a := range acks {
		if in(a.at) {
			answered = append(answered, a.at)
		}
		if a.sent.Before(f.at) {
			continue
		}
		if !rec.wrote || a.at.Sub(f.at) < rec.firstAccept {
			rec.firstAccept, rec.wrote = a.at.Sub(f.at), true
		}
	}
	rec.writePause = longestPause(f.at, end, answered)
	for _, s := range sends {
		if s.WAMID == "" || !s.At.After(f.at) {
			continue
		}
		if !rec.sent || s.At.Sub(f.at) < rec.firstSend {
			rec.firstSend, rec.sent = s.At.Sub(f.at), true
		}
		if in(s.At) {
			delivered = append(delivered, s.At)
		}
	}
	rec.sendPause = longestPause(f.at, end, delivered, refusing...)
	return rec
}

// longestPause is the longest stretch without an event (events, all
// after from, unsorted) from from until the first event past end: the
// first stretch counts from from; a stretch that runs past end counts in
// full (ordo stuck); after the last event nothing counts (the load may
// have ended). The time a stretch spends in an excused span is not
// counted.
func longestPause(from, end time.Time, events []time.Time, excused ...exclusiveSpan) time.Duration {
	sorted := slices.SortedFunc(slices.Values(events), time.Time.Compare)
	longest, prev := time.Duration(0), from
	for _, t := range sorted {
		longest = max(longest, t.Sub(prev)-stoppedDelivery(excused, prev, t))
		if t.After(end) {
			break
		}
		prev = t
	}
	return longest
}

// refusingSends returns the spans of spans in which the provider refused
// every send (a Cloud API outage, until the numbers' next probe).
func refusingSends(spans []exclusiveSpan) []exclusiveSpan {
	var out []exclusiveSpan
	for _, s := range spans {
		if s.kind == faultCloudAPIOutage {
			out = append(out, s)
		}
	}
	return out
}

// judgeFailovers adds the failover check: each fault was injected as
// planned, the cluster was healthy again, and ordo accepted and sent again
// within haRecoverBound; the recovery of each is a line of the report.
func judgeFailovers(rep *Report, in chaosInput) {
	var bad []string
	failovers := slices.SortedFunc(slices.Values(in.failovers), func(a, b haFault) int { return a.at.Compare(b.at) })
	for i, f := range failovers {
		var next time.Time
		if i+1 < len(failovers) {
			next = failovers[i+1].at
		}
		rec := measureFailover(f, next, in.ledger.acks, in.sends, refusingSends(in.exclusives))
		line := fmt.Sprintf("%s: %s; primary %s → %s; ", f.kind, f.what, f.from, f.to)
		if f.healthy > 0 {
			line += fmt.Sprintf("cluster healthy after %.1fs; ", f.healthy.Seconds())
		} else {
			line += "cluster not healthy again (" + f.err + "); "
		}
		line += fmt.Sprintf("writes paused %.1fs (first 2xx of a request sent after the fault at +%.1fs), sends paused %.1fs (first delivery after it at +%.1fs)",
			rec.writePause.Seconds(), rec.firstAccept.Seconds(), rec.sendPause.Seconds(), rec.firstSend.Seconds())
		rep.notes = append(rep.notes, line)
		switch {
		case f.healthy == 0:
			bad = append(bad, line)
		case !rec.wrote || !rec.sent || rec.writePause > haRecoverBound || rec.sendPause > haRecoverBound:
			bad = append(bad, line)
		}
	}
	rep.add("ordo accepts and sends again after each failover", len(bad) == 0 && len(in.failovers) > 0,
		fmt.Sprintf("%d failover faults, %d not recovered from within %s", len(in.failovers), len(bad), haRecoverBound), bad...)
}

// haAmbiguousBefore is how long before a failover a send may have been
// delivered and still not be recorded when the primary went: the send's
// timeout (Config.SendTimeout, 1.5 s) and the round trip of its record.
const haAmbiguousBefore = 3 * time.Second

// failoverAmbiguous adds to faulted (returned as a new set) every text
// delivered more than once whose first delivery came from haAmbiguousBefore
// before a failover until the cluster was healthy again: its drain's
// record of the send may have died with the primary, and the drain that
// took over resent it as ambiguous (counted; the duplicate check holds it
// to that). The deploy and resolve checks, which count no ambiguity, must
// not blame their own window for it.
func failoverAmbiguous(sends []chaosSend, failovers []haFault, faulted map[string]bool) map[string]bool {
	out := make(map[string]bool, len(faulted))
	for k := range faulted {
		out[k] = true
	}
	first := make(map[string]time.Time)
	n := make(map[string]int)
	for _, s := range sends {
		k := chaosSendKey(s.PhoneNumberID, s.To, s.Text)
		if t, ok := first[k]; !ok || s.At.Before(t) {
			first[k] = s.At
		}
		n[k]++
	}
	for k, at := range first {
		if n[k] < 2 {
			continue
		}
		for _, f := range failovers {
			end := f.at.Add(max(f.healthy, haRecoverBound))
			if at.After(f.at.Add(-haAmbiguousBefore)) && at.Before(end) {
				out[k] = true
				break
			}
		}
	}
	return out
}
