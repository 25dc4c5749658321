package chaos

import (
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestChaosJudge shows that each of the checker's checks fails on the
// problem it is there for, and only that check.
func TestChaosJudge(t *testing.T) {
	t.Parallel()
	perm := "x " + chaosUndeliverable

	// setup is a clean run: one conversation of tenant 0 with a, b, a
	// permanently failing message, and d; tenant 1 with one inbound message
	// answered by two replies.
	setup := func() chaosInput {
		l := newChaosLedger([]string{"P0", "P1"})
		msgs := []*chaosMsg{
			{tenant: 0, conv: "c", id: "m1", text: "a"},
			{tenant: 0, conv: "c", id: "m2", text: "b"},
			{tenant: 0, conv: "c", id: "m3", text: perm},
			{tenant: 0, conv: "c", id: "m4", text: "d"},
			{tenant: 1, conv: "c", id: "m1", text: "in", inbound: true},
		}
		for i, m := range msgs {
			l.offer(m)
			seq := int64(i + 1)
			if m.tenant == 1 {
				seq = 1
			}
			l.answer(m, 202, chaosAnswer{ID: m.id, MessageID: m.id, ConversationID: m.conv, Seq: seq})
		}
		hook := &chaosMsg{tenant: 1, conv: "w", id: "wamid.1", text: "hi", inbound: true, webhook: true}
		l.offer(hook)
		l.answerWebhook(hook, chaosWebhookAnswer{Accepted: 1})
		l.answerWebhook(hook, chaosWebhookAnswer{Duplicates: 1}) // Meta's redelivery
		l.count(len(msgs)+2, 0, 0)
		send := func(pnid, text, step string) chaosSend {
			return chaosSend{PhoneNumberID: pnid, To: "c", Text: text, CallbackData: step}
		}
		faults := map[string]int{faultWorkerKill: 3, faultAPIKill: 1, faultPGRestart: 1, faultWorkerStall: 1}
		return chaosInput{
			ledger: l,
			sends: []chaosSend{
				send("P0", "a", "1"), send("P1", "in #1", "11"), send("P0", "b", "2"),
				send("P1", "in #2", "12"), send("P0", "d", "4"),
				{PhoneNumberID: "P1", To: "w", Text: "hi #1", CallbackData: "21"},
				{PhoneNumberID: "P1", To: "w", Text: "hi #2", CallbackData: "22"},
			},
			provider: chaosProviderRecord{
				faults: map[string]int{faultProvider500: 1, faultProviderTimeout: 1, faultProviderDelivered: 1,
					faultProviderPairRate: 1, faultProviderPermanent: 1},
				permanent: map[string]int{perm: 1},
			},
			meta:        chaosMetaRecord{taken: 7, sent: 7},
			ambiguous:   map[string]int{},
			deadLetters: []chaosDeadLetter{{tenant: 0, messageID: "m3"}},
			bad:         []chaosProbeSummary{{name: "malformed JSON", chaosProbeResult: chaosProbeResult{runs: 3}}},
			faults:      faults,
			planned:     faults,
			settled:     true,
		}
	}

	for _, tc := range []struct {
		name   string
		mutate func(in *chaosInput)
		fails  string // the one check that must fail; "" for none
	}{
		{"clean run", func(in *chaosInput) {}, ""},
		{"a failed status not dead-lettered", func(in *chaosInput) {
			// m2 was taken by the provider and then reported failed by Meta.
			for _, m := range in.ledger.order[chaosConvKey{tenant: 0, conv: "c"}] {
				if m.id == "m2" {
					m.text = "b " + chaosFailsLater
				}
			}
			in.sends[2].Text = "b " + chaosFailsLater
		}, "dead letters = the provider's permanent failures and Meta's failed statuses"},
		{"a text never sent", func(in *chaosInput) { in.sends = append(in.sends[:2], in.sends[3:]...) }, "nothing lost"},
		{"a reply never sent", func(in *chaosInput) { in.sends = in.sends[:3] }, "nothing lost"},
		{"a permanent failure never offered", func(in *chaosInput) {
			in.provider.permanent = nil
			in.deadLetters = nil
		}, ""}, // two checks fail; judged below
		{"a duplicate nobody counted", func(in *chaosInput) {
			in.sends = append(in.sends, chaosSend{PhoneNumberID: "P0", To: "c", Text: "d", CallbackData: "4"})
		}, "no duplicate beyond the ambiguous sends counted"},
		{"a duplicate the engine counted", func(in *chaosInput) {
			in.sends = append(in.sends, chaosSend{PhoneNumberID: "P0", To: "c", Text: "d", CallbackData: "4"})
			in.ambiguous["4"] = 1
		}, ""},
		{"a text sent under two steps", func(in *chaosInput) {
			in.sends = append(in.sends, chaosSend{PhoneNumberID: "P0", To: "c", Text: "d", CallbackData: "9"})
			in.ambiguous["4"], in.ambiguous["9"] = 5, 5
		}, "no duplicate beyond the ambiguous sends counted"},
		{"ambiguous counts unreadable", func(in *chaosInput) { in.ambErr = errors.New("down") }, "no duplicate beyond the ambiguous sends counted"},
		{"out of order", func(in *chaosInput) { in.sends[0], in.sends[2] = in.sends[2], in.sends[0] }, "strict order per conversation"},
		{"replies out of order", func(in *chaosInput) { in.sends[1], in.sends[3] = in.sends[3], in.sends[1] }, "strict order per conversation"},
		{"a message started early", func(in *chaosInput) {
			in.provider.early = []string{`"m4" (seq 4) started before "b" of "m2" (seq 2) was sent`}
		}, "each message starts after the one before it finished"},
		{"a refused request sent", func(in *chaosInput) {
			in.sends = append(in.sends, chaosSend{PhoneNumberID: "P0", To: "c", Text: chaosRejected + " 1"})
		}, "nothing sent that was not accepted"},
		{"the same text in another tenant's conversation", func(in *chaosInput) {
			in.sends = append(in.sends, chaosSend{PhoneNumberID: "P1", To: "c", Text: "a"})
		}, "nothing sent that was not accepted"},
		{"a dead letter missing", func(in *chaosInput) { in.deadLetters = nil }, "dead letters = the provider's permanent failures and Meta's failed statuses"},
		{"a dead letter too many", func(in *chaosInput) {
			in.deadLetters = append(in.deadLetters, chaosDeadLetter{tenant: 0, messageID: "m1"})
		}, "dead letters = the provider's permanent failures and Meta's failed statuses"},
		{"accepted twice", func(in *chaosInput) {
			m := in.ledger.msgs[0]
			in.ledger.answer(m, 202, chaosAnswer{ID: m.id, MessageID: m.id, ConversationID: m.conv, Seq: m.seq})
		}, "accepted once"},
		{"a webhook message accepted twice", func(in *chaosInput) {
			in.ledger.answerWebhook(in.ledger.msgs[len(in.ledger.msgs)-1], chaosWebhookAnswer{Accepted: 1})
		}, "accepted once"},
		{"a webhook's replies out of order", func(in *chaosInput) {
			n := len(in.sends)
			in.sends[n-1], in.sends[n-2] = in.sends[n-2], in.sends[n-1]
		}, "strict order per conversation"},
		{"a repeat answered with another seq", func(in *chaosInput) {
			m := in.ledger.msgs[0]
			in.ledger.answer(m, 200, chaosAnswer{ID: m.id, MessageID: m.id, ConversationID: m.conv, Seq: 9, Duplicate: true})
		}, "accepted once"},
		{"a repeat after an operator's replay answered with the replayed seq", func(in *chaosInput) {
			m := in.ledger.msgs[0]
			in.ledger.answer(m, 200, chaosAnswer{ID: m.id, MessageID: m.id, ConversationID: m.conv, Seq: 9, Duplicate: true})
			in.replays = map[chaosConvKey]int{{0, "c"}: 1}
		}, ""},
		{"a repeat answered with another message's id", func(in *chaosInput) {
			m := in.ledger.msgs[0]
			in.ledger.answer(m, 200, chaosAnswer{ID: "other", MessageID: m.id, ConversationID: m.conv, Seq: m.seq, Duplicate: true})
			in.replays = map[chaosConvKey]int{{0, "c"}: 1}
		}, "accepted once"},
		{"a seq skipped", func(in *chaosInput) { in.ledger.msgs[3].seq = 5 }, "seq is the clients' order, without gaps"},
		{"a seq taken by an operator's replay", func(in *chaosInput) {
			in.ledger.msgs[3].seq = 5
			in.replays = map[chaosConvKey]int{{0, "c"}: 1}
		}, ""},
		{"two seqs taken, one replay", func(in *chaosInput) {
			in.ledger.msgs[3].seq = 6
			in.replays = map[chaosConvKey]int{{0, "c"}: 1}
		}, "seq is the clients' order, without gaps"},
		{"a deploy's duplicate", func(in *chaosInput) {
			at := time.Now()
			for i := range in.sends {
				in.sends[i].At = at.Add(time.Duration(i) * time.Second)
			}
			again := in.sends[0]
			again.At = at.Add(time.Minute)
			in.sends = append(in.sends, again)
			in.ambiguous = map[string]int{"1": 1} // the engine counted it: excused by the ambiguous check alone
			in.policies = []string{"resend", "reconcile"}
			in.deploys = []faultWindow{{kind: faultRollingDeploy, what: "worker-1 was shutting down", from: at.Add(-time.Second), term: at, exit: at.Add(200 * time.Millisecond)}}
		}, "no duplicate caused by a deploy"},
		{"an offer never answered", func(in *chaosInput) { in.ledger.count(1, 3, 1) }, "every offer answered 2xx"},
		{"a valid offer refused", func(in *chaosInput) {
			in.ledger.reject(in.ledger.msgs[0], 400, []byte(`{"error":{}}`))
		}, "every offer answered 2xx"},
		{"a message ordo shows unfinished", func(in *chaosInput) {
			in.unfinished = []string{`"m2": 200, status "running", want "done"`}
		}, "ordo shows every accepted message finished"},
		{"a bad request answered wrong", func(in *chaosInput) {
			in.bad[0].wrong, in.bad[0].firstWrong = 1, "want 400, got 500"
		}, "bad input gets the contract's error and stores nothing"},
		{"a credential mix-up", func(in *chaosInput) { in.provider.wrongToken = 1 }, "each tenant's credential and handler secret used for it alone"},
		{"a wrong Idempotency-Key", func(in *chaosInput) { in.handler.badKey = 1 }, "each tenant's credential and handler secret used for it alone"},
		{"a bad handler signature", func(in *chaosInput) { in.handler.badSignature = 1 }, "each tenant's credential and handler secret used for it alone"},
		{"no Postgres restart", func(in *chaosInput) {
			in.faults = map[string]int{faultWorkerKill: 3, faultAPIKill: 1, faultWorkerStall: 1}
		}, "every kind of fault injected"},
		{"no pair-rate error", func(in *chaosInput) { delete(in.provider.faults, faultProviderPairRate) }, "every kind of fault injected"},
		{"a status webhook never answered", func(in *chaosInput) { in.meta.unanswered = 1 }, "every status webhook answered 200"},
		{"a status webhook refused", func(in *chaosInput) { in.meta.refused = []string{"400"} }, "every status webhook answered 200"},
		{"a delivery never reported", func(in *chaosInput) { in.meta.sent = 6 }, "every status webhook answered 200"},
		{"never settled", func(in *chaosInput) { in.settled = false }, "settled after the load"},
		{"a hostile flood within bounds", func(in *chaosInput) { in.hostile = []hostileRecord{calmFlood()} }, ""},
		{"a hostile flood that costs 201 MB", func(in *chaosInput) {
			h := calmFlood()
			h.peakKB = h.idleKB + 201<<10
			in.hostile = []hostileRecord{h}
		}, "a hostile flood keeps memory and latency bounded"},
		{"a hostile flood that slows REST to a second at p99", func(in *chaosInput) {
			h := calmFlood()
			h.rest = append(h.rest, time.Second, time.Second) // 2 of 100: the p99
			in.hostile = []hostileRecord{h}
		}, "a hostile flood keeps memory and latency bounded"},
		{"a hostile flood that slows signed webhooks", func(in *chaosInput) {
			h := calmFlood()
			h.webhook = []time.Duration{1500 * time.Millisecond}
			in.hostile = []hostileRecord{h}
		}, "a hostile flood keeps memory and latency bounded"},
		{"a busy machine: over a second before the flood and no slower in it", func(in *chaosInput) {
			// make chaos seed 1 at load 10: REST p99 2.394s just before the
			// flood, 1.91s in it. The machine was slow, not the flood.
			h := calmFlood()
			h.rest, h.restBefore = slowBy(h.rest, 1900*time.Millisecond), slowBy(h.rest, 2400*time.Millisecond)
			h.webhook, h.webhookBefore = slowBy(h.webhook, 1900*time.Millisecond), slowBy(h.webhook, 1300*time.Millisecond)
			in.hostile = []hostileRecord{h}
		}, ""},
		{"a busy machine, and the flood slows it by more than half again", func(in *chaosInput) {
			h := calmFlood()
			h.rest, h.restBefore = slowBy(h.rest, 4*time.Second), slowBy(h.rest, 2*time.Second)
			in.hostile = []hostileRecord{h}
		}, "a hostile flood keeps memory and latency bounded"},
		{"over a second in the flood, with nothing measured before it", func(in *chaosInput) {
			h := calmFlood()
			h.rest = slowBy(h.rest, 1500*time.Millisecond)
			in.hostile = []hostileRecord{h}
		}, "a hostile flood keeps memory and latency bounded"},
		{"an unsigned flood body accepted", func(in *chaosInput) {
			h := calmFlood()
			h.outcomes["200"] = 1
			in.hostile = []hostileRecord{h}
		}, "a hostile flood keeps memory and latency bounded"},
		{"the API restarted in a flood", func(in *chaosInput) {
			h := calmFlood()
			h.restarted = true
			in.hostile = []hostileRecord{h}
		}, "a hostile flood keeps memory and latency bounded"},
		{"a flood with no real traffic to measure", func(in *chaosInput) {
			h := calmFlood()
			h.rest = nil
			in.hostile = []hostileRecord{h}
		}, "a hostile flood keeps memory and latency bounded"},
		{"a data race", func(in *chaosInput) { in.logProblems = []string{"worker-1: WARNING: DATA RACE"} }, "no panic, data race or deadlock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := setup()
			tc.mutate(&in)
			rep := chaosJudge(in)
			var failed []string
			for _, c := range rep.checks {
				if !c.ok {
					failed = append(failed, c.name)
				}
			}
			want := []string{}
			switch {
			case tc.name == "a permanent failure never offered":
				want = []string{"nothing lost", "dead letters = the provider's permanent failures and Meta's failed statuses"}
			case tc.fails != "":
				want = []string{tc.fails}
			}
			if strings.Join(failed, "|") != strings.Join(want, "|") {
				t.Errorf("failed checks %q, want %q", failed, want)
			}
			if rep.Failed() != len(want) {
				t.Errorf("failed() = %d, want %d", rep.Failed(), len(want))
			}
		})
	}
}

// calmFlood is a hostile flood that stayed within its bounds: 199 MB over
// the RSS before it, 98 of 100 REST waits at 100ms and 2 at 990ms.
func calmFlood() hostileRecord {
	h := hostileRecord{from: time.Now(), to: time.Now().Add(20 * time.Second), idleKB: 30 << 10, peakKB: 30<<10 + 199<<10,
		sent: 10, outcomes: map[string]int{"401": 4, "413": 5, "connection closed": 1}}
	for i := range 100 {
		d := 100 * time.Millisecond
		if i < 2 {
			d = 990 * time.Millisecond
		}
		h.rest = append(h.rest, d)
		h.webhook = append(h.webhook, d)
	}
	return h
}

// slowBy is ds with its slowest 2 in 100 (the p99) at d.
func slowBy(ds []time.Duration, d time.Duration) []time.Duration {
	out := slices.Clone(ds)
	for i := range min(2, len(out)) {
		out[i] = d
	}
	return out
}

// The flood's own measures: p99 by nearest rank, the RSS and CPU time of a
// live process, and a body of exactly its size that the harness does not hold.
func TestHostileFloodMeasures(t *testing.T) {
	t.Parallel()
	var d []time.Duration
	for i := 1; i <= 200; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if got := p99(d); got != 198*time.Millisecond {
		t.Errorf("p99 of 1..200ms = %s, want 198ms", got)
	}
	if got := p99([]time.Duration{5 * time.Second}); got != 5*time.Second {
		t.Errorf("p99 of one = %s", got)
	}
	if kb, err := readRSS(os.Getpid()); err != nil || kb <= 0 {
		t.Errorf("readRSS(self) = %d, %v", kb, err)
	}
	if _, err := readCPU(os.Getpid()); err != nil {
		t.Errorf("readCPU(self): %v", err)
	}
	if _, err := readRSS(0); err == nil {
		t.Error("readRSS(0) read something")
	}
	n, err := io.Copy(io.Discard, &hostileBody{left: HostileBodyBytes})
	if err != nil || n != HostileBodyBytes {
		t.Errorf("flood body: %d bytes, %v; want %d", n, err, HostileBodyBytes)
	}
	// With the flood on, the plan holds one, inside the load, after a
	// window as long as it to compare with.
	cfg := Config{Duration: 2 * time.Minute, Seed: 7, HostileFor: 20 * time.Second, Exec: []string{"ordo"}}.withDefaults()
	if err := cfg.validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	var floods int
	for _, f := range newFaultPlan(cfg).faults {
		if s := f.slot(); f.Kind() == faultHostileFlood {
			floods++
			if s.at < cfg.HostileFor || s.at+s.pause > cfg.Duration {
				t.Errorf("flood at %s for %s: not inside the load after a window as long", s.at, s.pause)
			}
		}
	}
	if floods != 1 {
		t.Errorf("%d floods planned, want 1", floods)
	}
	cfg.HostileFor = time.Minute
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "--hostile") {
		t.Errorf("a flood of half the load: %v, want refused", err)
	}
}

// TestChaosFaultPlan: the plan is the seed's, and it holds every kind of
// fault, the rare ones apart from each other.
func TestChaosFaultPlan(t *testing.T) {
	t.Parallel()
	cfg := Config{Duration: 40 * time.Second, Seed: 7}.withDefaults()
	a, b := newFaultPlan(cfg), newFaultPlan(cfg)
	if len(a.faults) != len(b.faults) {
		t.Fatalf("same seed, %d and %d faults", len(a.faults), len(b.faults))
	}
	for i := range a.faults {
		if a.faults[i].Kind() != b.faults[i].Kind() || a.faults[i].slot() != b.faults[i].slot() {
			t.Fatalf("same seed, fault %d differs: %s %+v and %s %+v", i, a.faults[i].Kind(), a.faults[i].slot(), b.faults[i].Kind(), b.faults[i].slot())
		}
	}
	k := a.kinds()
	for _, kind := range []string{faultWorkerKill, faultAPIKill, faultPGRestart, faultWorkerStall} {
		if k[kind] == 0 {
			t.Errorf("no %s planned in %+v", kind, k)
		}
	}
	if k[faultRollingDeploy] != 0 {
		t.Errorf("%d rolling deploys planned by default, want none", k[faultRollingDeploy])
	}
	for _, f := range a.faults {
		if s := f.slot(); f.Kind() == faultWorkerStall && s.at+s.pause > cfg.Duration {
			t.Errorf("stall at %s for %s outlasts the load (%s)", s.at, s.pause, cfg.Duration)
		}
	}
}

// TestChaosStartedEarly: the provider's judgement of when a message starts.
func TestChaosStartedEarly(t *testing.T) {
	t.Parallel()
	l := newChaosLedger([]string{"P0"})
	a := &chaosMsg{tenant: 0, conv: "c", id: "a", text: "a"}
	p := &chaosMsg{tenant: 0, conv: "c", id: "p", text: "p " + chaosUndeliverable}
	in := &chaosMsg{tenant: 0, conv: "c", id: "in", text: "in", inbound: true}
	b := &chaosMsg{tenant: 0, conv: "c", id: "b", text: "b"}
	other := &chaosMsg{tenant: 0, conv: "d", id: "o", text: "o"}
	for _, m := range []*chaosMsg{a, p, in, b, other} {
		l.offer(m)
	}
	key := func(text string) string { return chaosSendKey("P0", "c", text) }
	settledOf := func(keys ...string) func(k, text string) bool {
		return func(k, text string) bool {
			for _, s := range keys {
				if s == k {
					return true
				}
			}
			return false
		}
	}
	for _, tc := range []struct {
		name    string
		start   string // send key, or "" for the handler call of id
		id      string
		settled []string
		early   bool
	}{
		{"first message", key("a"), "", nil, false},
		{"another conversation is independent", chaosSendKey("P0", "d", "o"), "", nil, false},
		{"before its predecessor was sent", key("p " + chaosUndeliverable), "", nil, true},
		{"after its predecessor was sent", key("p " + chaosUndeliverable), "", []string{key("a")}, false},
		{"handler call before a permanent failure settled", "", "in", []string{key("a")}, true},
		{"handler call after", "", "in", []string{key("a"), key("p " + chaosUndeliverable)}, false},
		{"second reply before the first", key("in #2"), "", []string{key("a"), key("p " + chaosUndeliverable)}, true},
		{"second reply after the first", key("in #2"), "", []string{key("a"), key("p " + chaosUndeliverable), key("in #1")}, false},
		{"next message before the replies", key("b"), "", []string{key("a"), key("p " + chaosUndeliverable), key("in #1")}, true},
		{"next message after", key("b"), "", []string{key("a"), key("p " + chaosUndeliverable), key("in #1"), key("in #2")}, false},
	} {
		got := l.startedEarly(tc.start, 0, tc.id, settledOf(tc.settled...))
		if (got != "") != tc.early {
			t.Errorf("%s: startedEarly = %q, want early %v", tc.name, got, tc.early)
		}
	}
}

// TestDeployDuplicates: a text delivered again after its first delivery
// came during a deploy's shutdown window is the deploy's duplicate, unless
// the provider made that delivery ambiguous itself.
func TestWindowDuplicates(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	deploys := []faultWindow{{kind: faultRollingDeploy, what: "worker-1 was shutting down", from: t0.Add(10 * time.Second), term: t0.Add(10350 * time.Millisecond), exit: t0.Add(12 * time.Second)}}
	send := func(text string, at time.Duration) chaosSend {
		return chaosSend{PhoneNumberID: "P0", To: "c", Text: text, At: t0.Add(at)}
	}
	for _, tc := range []struct {
		name    string
		sends   []chaosSend
		faulted []string
		want    int
	}{
		{"sent once in the window", []chaosSend{send("a", 11*time.Second)}, nil, 0},
		{"sent again after a delivery in the window", []chaosSend{send("a", 11*time.Second), send("a", 20*time.Second)}, nil, 1},
		{"first delivery just before SIGTERM", []chaosSend{send("a", 9800*time.Millisecond), send("a", 20*time.Second)}, nil, 1},
		{"first delivery long before the deploy", []chaosSend{send("a", 2*time.Second), send("a", 11*time.Second)}, nil, 0},
		{"first delivery after the exit", []chaosSend{send("a", 14*time.Second), send("a", 20*time.Second)}, nil, 0},
		{"the provider's own ambiguity", []chaosSend{send("a", 11*time.Second), send("a", 20*time.Second)}, []string{chaosSendKey("P0", "c", "a")}, 0},
	} {
		faulted := make(map[string]bool)
		for _, k := range tc.faulted {
			faulted[k] = true
		}
		got := windowDuplicates(tc.sends, deploys, faulted, []string{"P0"}, []string{"resend"})
		if len(got) != tc.want {
			t.Errorf("%s: %d deploy duplicates %q, want %d", tc.name, len(got), got, tc.want)
		}
		for _, d := range got {
			if !strings.Contains(d, "worker-1") || !strings.Contains(d, "policy resend") {
				t.Errorf("%s: detail %q does not name the process and the policy", tc.name, d)
			}
		}
	}
}

// deployStall measures the gaps that overlap a shutdown, and only those.
func TestDeployStall(t *testing.T) {
	t.Parallel()
	at := func(s float64) time.Time { return time.Unix(1000, 0).Add(time.Duration(s * float64(time.Second))) }
	send := func(to string, s float64) chaosSend { return chaosSend{PhoneNumberID: "P", To: to, At: at(s)} }
	sends := []chaosSend{send("a", 0), send("b", 1), send("a", 9), send("b", 3), send("a", 10), send("b", 20), send("c", 30), send("c", 60)}
	deploys := []faultWindow{{term: at(4), exit: at(6)}}
	got, conv := deployStall(sends, deploys)
	if got != 17*time.Second || conv != "P b" {
		t.Fatalf("deployStall = %s %q, want 17s for P b (3→20 spans the shutdown; c's 30 s gap does not)", got, conv)
	}
}
