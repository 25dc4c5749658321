package chaos

import (
	"testing"
	"time"
)

// TestMeasureFailover reads a failover's pauses from the clients' answers
// and the provider's deliveries, and the check fails a failover after
// which ordo never wrote again.
func TestMeasureFailover(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	f := haFault{kind: faultHAPrimaryKill, what: "kill", at: at(10), from: "node1", to: "node2", healthy: 8 * time.Second}
	acks := []chaosAck{
		{sent: at(9.5), at: at(9.9)},  // before the fault: not in the window
		{sent: at(9.8), at: at(10.2)}, // sent before, answered after: ends no pause
		{sent: at(10.5), at: at(14.0)},
		{sent: at(13.9), at: at(14.1)},
		{sent: at(14.2), at: at(14.3)},
	}
	sends := []chaosSend{
		{WAMID: "w1", At: at(10.1)},
		{WAMID: "", At: at(12)}, // refused: not a delivery
		{WAMID: "w2", At: at(16.1)},
	}
	rec := measureFailover(f, time.Time{}, acks, sends, nil)
	// The longest stretch without a 2xx: 10.2 → 14.0 s.
	if want := 3800 * time.Millisecond; rec.writePause != want {
		t.Errorf("write pause %s, want %s", rec.writePause, want)
	}
	if want := 4 * time.Second; rec.firstAccept != want {
		t.Errorf("first accept after %s, want %s", rec.firstAccept, want)
	}
	if want := 6 * time.Second; rec.sendPause != want {
		t.Errorf("send pause %s, want %s", rec.sendPause, want)
	}
	if want := 100 * time.Millisecond; rec.firstSend != want {
		t.Errorf("first send after %s, want %s", rec.firstSend, want)
	}

	// The next failover, at 14.05 s, ends this one's window: its pauses
	// are its own.
	rec = measureFailover(f, at(14.05), acks, sends, nil)
	if want := 3800 * time.Millisecond; rec.writePause != want {
		t.Errorf("write pause before the next failover %s, want %s", rec.writePause, want)
	}
	if want := 3950 * time.Millisecond; rec.sendPause != want {
		t.Errorf("send pause before the next failover %s, want %s", rec.sendPause, want)
	}

	// A Cloud API outage from 12 s until 75 s (its end and the numbers'
	// probe): the provider refuses every send, so of the stretch without
	// a delivery from 10.1 s to 76 s only 10.1–12 s and 75–76 s are the
	// failover's (chaos-ha, seed 1795785193103794480: 60.3 s "paused" after a
	// switchover whose cluster was healthy 7.7 s later).
	outage := []exclusiveSpan{{kind: faultCloudAPIOutage, from: at(12), to: at(75)}}
	late := []chaosSend{{WAMID: "w1", At: at(10.1)}, {WAMID: "w2", At: at(76)}}
	if got, want := measureFailover(f, time.Time{}, acks, late, outage).sendPause, 2900*time.Millisecond; got != want {
		t.Errorf("send pause across a Cloud API outage %s, want %s (the outage is not the failover's)", got, want)
	}
	if got, want := measureFailover(f, time.Time{}, acks, late, nil).sendPause, 65900*time.Millisecond; got != want {
		t.Errorf("send pause without the outage excused %s, want %s", got, want)
	}

	l := newChaosLedger(nil)
	l.acks = acks
	for _, tc := range []struct {
		name    string
		fault   haFault
		sends   []chaosSend
		refused []exclusiveSpan
		ok      bool
	}{
		{"recovered", f, sends, nil, true},
		{"not healthy again", haFault{kind: f.kind, at: f.at, err: "no leader"}, sends, nil, false},
		{"nothing sent after it", f, sends[:0], nil, false},
		{"sends stuck past the bound", f, []chaosSend{{WAMID: "w3", At: f.at.Add(haRecoverBound + time.Second)}}, nil, false},
		{"sends refused by the Cloud API past the bound", f, []chaosSend{{WAMID: "w3", At: f.at.Add(haRecoverBound + time.Second)}}, outage, true},
	} {
		rep := &Report{}
		judgeFailovers(rep, chaosInput{ledger: l, sends: tc.sends, ha: true, failovers: []haFault{tc.fault}, exclusives: tc.refused})
		if got := rep.Failed() == 0; got != tc.ok {
			t.Errorf("%s: check passed %v, want %v (%v)", tc.name, got, tc.ok, rep.checks)
		}
		if len(rep.notes) != 1 {
			t.Errorf("%s: %d report lines, want 1", tc.name, len(rep.notes))
		}
	}
}

// TestFailoverAmbiguous excuses from the windowed duplicate checks a text
// first delivered just before a failover and delivered again, and nothing
// else.
func TestFailoverAmbiguous(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC)
	f := haFault{kind: faultHAPrimaryKill, at: t0.Add(10 * time.Second), healthy: 5 * time.Second}
	sends := []chaosSend{
		{PhoneNumberID: "P", To: "c", Text: "just before", At: t0.Add(9 * time.Second)},
		{PhoneNumberID: "P", To: "c", Text: "just before", At: t0.Add(16 * time.Second)},
		{PhoneNumberID: "P", To: "c", Text: "long before", At: t0.Add(2 * time.Second)},
		{PhoneNumberID: "P", To: "c", Text: "long before", At: t0.Add(3 * time.Second)},
		{PhoneNumberID: "P", To: "c", Text: "once", At: t0.Add(10 * time.Second)},
	}
	got := failoverAmbiguous(sends, []haFault{f}, map[string]bool{"provider's": true})
	want := map[string]bool{"provider's": true, chaosSendKey("P", "c", "just before"): true}
	if len(got) != len(want) {
		t.Fatalf("excused %v, want %v", got, want)
	}
	for k := range want {
		if !got[k] {
			t.Errorf("%q not excused", k)
		}
	}
}
