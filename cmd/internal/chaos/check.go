package chaos

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
)

type chaosSend = whatsapptest.Send

// chaosSendKey names a delivery: which business number sent what text to whom.
func chaosSendKey(pnid, to, text string) string { return pnid + "\x00" + to + "\x00" + text }

func chaosDelivered(sends []chaosSend) map[string]bool {
	out := make(map[string]bool, len(sends))
	for _, s := range sends {
		out[chaosSendKey(s.PhoneNumberID, s.To, s.Text)] = true
	}
	return out
}

// chaosInput is everything the checker reads: the clients' ledger, the
// provider's record (its deliveries and its failures), and from ordo only
// its count of ambiguous sends per step and its dead-letter listing (through
// the API) — the two claims the checker holds against the provider's side.
type chaosInput struct {
	ledger      *chaosLedger
	sends       []chaosSend
	provider    chaosProviderRecord
	handler     chaosHandlerRecord
	meta        chaosMetaRecord
	ambiguous   map[string]int // step id → ambiguous sends the engine counted
	ambErr      error
	deadLetters []chaosDeadLetter
	dlErr       error
	unfinished  []string // accepted messages ordo's API does not show finished
	bad         []chaosProbeSummary
	faults      map[string]int // process faults injected
	planned     map[string]int
	settled     bool
	waited      time.Duration
	quiesce     time.Duration
	logProblems []string
	deploys     []faultWindow        // each process's shutdown in a rolling deploy
	resolves    []faultWindow        // each operator's replay or skip of a dead letter
	replays     map[chaosConvKey]int // dead letters replayed per conversation
	policies    []string             // per tenant: resend or reconcile
	hostile     []hostileRecord      // each hostile flood's figures
	ha          bool                 // the run's database was an HA cluster (--ha)
	failovers   []haFault            // with ha: each failover fault as it happened

	pgAways        []pgAwayRecord         // each Postgres outage's figures
	handlerOutages []handlerOutageRecord  // each handler outage's figures
	handledAt      map[string]time.Time   // slug:message id → the handler's first 200
	halted         []string               // the handler tenants' conversations shown halted
	exclusives     []exclusiveSpan        // when each exclusive fault ran
	spans          []faultSpan            // every fault injected, from injection to recovery
	start          time.Time              // the start of the load: times in the report are from it, as in the fault log
	partitions     []partitionRecord      // each worker partition as it happened
	workerSends    map[string][]time.Time // per worker: when it sent to the Cloud API, as its proxy saw it
	lease          time.Duration          // the workers' lease
	upgraded       bool                   // fault_upgrade.go: every process replaced by the new build
	upgradeFailed  string                 // fault_upgrade.go: the new build's migrate up failed so
	upgradeSkew    [2]time.Time           // fault_upgrade.go: the build before ran on the new schema then
}

// chaosCheck is one verdict.
type chaosCheck struct {
	name    string
	ok      bool
	summary string
	details []string
}

// Report is the checker's answer.
type Report struct {
	checks []chaosCheck

	offered, accepted, copies, retries int
	sent                               int
	lost, orderViolations, unexpected  int
	duplicates, beyondAmbiguous        int
	ambiguousCounted                   int
	deadLettered, permanentFailed      int
	faults                             map[string]int
	hostile                            []string // each hostile flood's figures
	notes                              []string // printed after the checks (the failovers' recovery)
}

func (r *Report) Failed() int {
	n := 0
	for _, c := range r.checks {
		if !c.ok {
			n++
		}
	}
	return n
}

func (r *Report) add(name string, ok bool, summary string, details ...string) {
	if len(details) > 20 {
		details = append(details[:20], fmt.Sprintf("… %d more", len(details)-20))
	}
	r.checks = append(r.checks, chaosCheck{name: name, ok: ok, summary: summary, details: details})
}

// chaosJudge judges a run.
func chaosJudge(in chaosInput) *Report {
	l := in.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	rep := &Report{offered: len(l.msgs), copies: l.copies, retries: l.retries, sent: len(in.sends), faults: map[string]int{}}
	for k, v := range in.faults {
		rep.faults[k] = v
	}
	for k, v := range in.provider.faults {
		rep.faults[k] = v
	}

	var (
		accepted []*chaosMsg
		webhooks int
	)
	for _, m := range l.msgs {
		if m.accepted {
			accepted = append(accepted, m)
		}
		if m.webhook {
			webhooks++
		}
	}
	rep.accepted = len(accepted)

	// 1. Every offer was answered, and every valid one with a 2xx.
	rep.add("every offer answered 2xx", l.unanswered == 0 && len(l.rejected) == 0 && rep.accepted == rep.offered,
		fmt.Sprintf("%d messages offered (%d as Meta's webhooks) in %d copies (%d retries after errors), %d accepted, %d copies unanswered, %d refused",
			rep.offered, webhooks, rep.copies, rep.retries, rep.accepted, l.unanswered, len(l.rejected)), l.rejected...)

	// 2. Accepted once: at most one 202 per message, and every answer the
	// original's — but for its seq in a conversation where the operator
	// replayed a dead letter: a replayed message goes to the end, and a
	// repeat after that is answered with its seq now.
	// Each failing message is followed by every try of every copy (what
	// was answered, when, in which fault's window), so that a failure says
	// whether an acknowledged message was lost and inserted again, or an
	// answer was another caller's.
	var twice []string
	for _, m := range accepted {
		reseq := m.reseq > 0 && in.replays[chaosConvKey{m.tenant, m.conv}] == 0
		if m.created > 1 || m.mismatch > 0 || reseq {
			twice = append(twice, fmt.Sprintf("%.80q: %d answers, %d of them 202, %d disagreeing with the first, %d with another seq",
				m.id, m.answers, m.created, m.mismatch, m.reseq))
			twice = append(twice, describeTries(m, in.start, in.spans)...)
		}
	}
	rep.add("accepted once", len(twice) == 0, fmt.Sprintf("%d messages with more than one acceptance or a differing answer", len(twice)), twice...)

	// 3. seq is the clients' order, 1, 2, 3… per conversation: nothing
	// refused took a number, nothing was accepted behind the clients' backs.
	var gaps []string
	convs := make([]chaosConvKey, 0, len(l.order))
	for k := range l.order {
		convs = append(convs, k)
	}
	sort.Slice(convs, func(i, j int) bool {
		if convs[i].tenant != convs[j].tenant {
			return convs[i].tenant < convs[j].tenant
		}
		return convs[i].conv < convs[j].conv
	})
	for _, k := range convs {
		// A dead letter replayed after its conversation moved on goes to
		// the tail with a new seq: the operator's replays may each take a
		// number between the clients' messages.
		extra, prev := int64(in.replays[k]), int64(0)
		for i, m := range l.order[k] {
			if m.webhook {
				break // a webhook's answer holds no seq
			}
			if n := int64(i + 1); m.seq <= prev || m.seq < n || m.seq > n+extra {
				gaps = append(gaps, fmt.Sprintf("tenant %d conversation %.40q: accepted #%d got seq %d (%d replays in it)", k.tenant, k.conv, i+1, m.seq, extra))
				break
			}
			prev = m.seq
		}
	}
	rep.add("seq is the clients' order, without gaps", len(gaps) == 0, fmt.Sprintf("%d conversations, %d out of line", len(convs), len(gaps)), gaps...)

	// 4. What the provider received against what was accepted. Check keys
	// conversations by its To; a business number and a To make ours.
	expected := make(map[string][]string)
	var permanent, failsLater []*chaosMsg
	for _, k := range convs {
		key := l.pnids[k.tenant] + "\x00" + k.conv
		msgs := append([]*chaosMsg(nil), l.order[k]...)
		sort.SliceStable(msgs, func(i, j int) bool { return msgs[i].seq < msgs[j].seq }) // a webhook conversation: all 0, kept in the order accepted
		for _, m := range msgs {
			expected[key] = append(expected[key], m.want()...)
			if m.permanent() {
				permanent = append(permanent, m)
			}
			if m.failsLater() {
				failsLater = append(failsLater, m)
			}
		}
	}
	keyed := make([]chaosSend, len(in.sends))
	for i, s := range in.sends {
		s.To = s.PhoneNumberID + "\x00" + s.To
		keyed[i] = s
	}
	found := whatsapptest.Check(keyed, expected)
	var neverTried []string
	for _, m := range permanent {
		if in.provider.permanent[m.text] == 0 {
			neverTried = append(neverTried, fmt.Sprintf("%.80q was never offered to the provider", m.id))
		}
	}
	rep.lost = found.Lost + len(neverTried)
	rep.orderViolations = found.OrderViolations
	rep.unexpected = found.Unexpected
	rep.duplicates = found.Duplicates
	var lostDetails, orderDetails, unexpectedDetails []string
	for _, d := range found.Details {
		d = strings.ReplaceAll(d, "\x00", " ")
		switch {
		case strings.Contains(d, "never delivered"):
			lostDetails = append(lostDetails, d)
		case strings.Contains(d, "delivered after"):
			orderDetails = append(orderDetails, d)
		case strings.Contains(d, "unexpected"):
			unexpectedDetails = append(unexpectedDetails, d)
		}
	}
	rep.add("nothing lost", rep.lost == 0, fmt.Sprintf("%d accepted messages neither sent nor failed permanently", rep.lost), append(lostDetails, neverTried...)...)
	rep.add("strict order per conversation", rep.orderViolations == 0, fmt.Sprintf("%d order violations", rep.orderViolations), orderDetails...)
	rep.add("each message starts after the one before it finished", len(in.provider.early) == 0,
		fmt.Sprintf("%d of %d starts (first send of a text, first handler call) came before the earlier messages were sent or failed for good", len(in.provider.early), in.provider.started),
		in.provider.early...)
	rep.add("nothing sent that was not accepted", rep.unexpected == 0, fmt.Sprintf("%d unexpected sends (refused requests, repeats' other bodies)", rep.unexpected), unexpectedDetails...)

	// 5. Duplicates: each extra delivery of a text must be covered by an
	// ambiguous send the engine counted on that text's step (the step id is
	// the callback data). A text sent under two steps was accepted twice.
	type delivery struct {
		n     int
		steps map[string]bool
	}
	per := make(map[string]*delivery)
	for _, s := range in.sends {
		k := chaosSendKey(s.PhoneNumberID, s.To, s.Text)
		d := per[k]
		if d == nil {
			d = &delivery{steps: make(map[string]bool)}
			per[k] = d
		}
		d.n++
		d.steps[s.CallbackData] = true
	}
	for _, n := range in.ambiguous {
		rep.ambiguousCounted += n
	}
	var beyond []string
	for k, d := range per {
		if d.n < 2 {
			continue
		}
		excused := 0
		if len(d.steps) == 1 {
			for step := range d.steps {
				excused = in.ambiguous[step]
			}
		}
		if extra := d.n - 1 - excused; extra > 0 {
			rep.beyondAmbiguous += extra
			beyond = append(beyond, fmt.Sprintf("%q sent %d times under %d step(s), %d ambiguous sends counted", strings.ReplaceAll(k, "\x00", " "), d.n, len(d.steps), excused))
		}
	}
	sort.Strings(beyond)
	if in.ambErr != nil {
		beyond = append(beyond, "could not read the engine's ambiguous counts: "+in.ambErr.Error())
	}
	rep.add("no duplicate beyond the ambiguous sends counted", rep.beyondAmbiguous == 0 && in.ambErr == nil,
		fmt.Sprintf("%d duplicates, %d ambiguous sends counted by the engine, %d duplicates beyond", rep.duplicates, rep.ambiguousCounted, rep.beyondAmbiguous), beyond...)

	// The provider's ambiguous answers, and with --ha the sends a failover
	// left unrecorded, are not a deploy's or a resolve's doing.
	excused := in.provider.faultDelivered
	if in.ha {
		excused = failoverAmbiguous(in.sends, in.failovers, in.provider.faultDelivered)
	}

	// 5b. A deploy sends nothing twice (contract 9): SIGTERM lets in-flight
	// steps finish and record. Only when the run deployed.
	if len(in.deploys) > 0 {
		dups := windowDuplicates(in.sends, in.deploys, excused, l.pnids, in.policies)
		stall, conv := deployStall(in.sends, in.deploys)
		rep.add("no duplicate caused by a deploy", len(dups) == 0,
			fmt.Sprintf("%d workers SIGTERMed and restarted; %d texts first delivered while one was shutting down and delivered again; longest gap between two sends of one conversation across a shutdown %.1fs (%.40q)",
				len(in.deploys), len(dups), stall.Seconds(), conv), dups...)
	}
	// 5c. Likewise an operator's replay or skip of a dead letter while its
	// conversation is busy: it must not take the conversation over.
	if len(in.resolves) > 0 {
		dups := windowDuplicates(in.sends, in.resolves, excused, l.pnids, in.policies)
		rep.add("no duplicate caused by a replay or skip", len(dups) == 0,
			fmt.Sprintf("%d dead letters replayed or skipped under load; %d texts first delivered meanwhile and delivered again", len(in.resolves), len(dups)), dups...)
	}

	// 5d. Strangers flooding the public webhook cost the API process
	// bounded memory and the real clients no more than a second at p99.
	if len(in.hostile) > 0 {
		var problems, figures []string
		for _, h := range in.hostile {
			problems = append(problems, h.problems()...)
			figures = append(figures, h.describe())
			rep.hostile = append(rep.hostile, h.describe())
		}
		rep.add("a hostile flood keeps memory and latency bounded", len(problems) == 0,
			fmt.Sprintf("RSS within %d MB of before, real REST and signed webhook p99 under %s (or %.1f× their p99 just before, when that was over it): %s", HostileRSSGrowthMax>>20, HostileP99Max, HostileP99Ratio, strings.Join(figures, "; ")), problems...)
	}

	// 5e. A dependency away is a state: Postgres (quiet logs, 503 with
	// Retry-After, /readyz), the tenants' handler (no dead letter, no halt,
	// each conversation resumed in order after its return).
	judgePGAways(rep, in)
	judgeHandlerOutages(rep, in)

	// 6. Dead letters: exactly the messages the provider failed for good.
	rep.permanentFailed = len(in.provider.permanent)
	rep.deadLettered = len(in.deadLetters)
	want := make(map[chaosDeadLetter]bool)
	for _, m := range append(append([]*chaosMsg(nil), permanent...), failsLater...) {
		want[chaosDeadLetter{tenant: m.tenant, messageID: m.id}] = true
	}
	var dlWrong []string
	got := make(map[chaosDeadLetter]bool)
	for _, d := range in.deadLetters {
		got[d] = true
		if !want[d] {
			dlWrong = append(dlWrong, fmt.Sprintf("tenant %d message %.80q dead-lettered, but neither the provider nor a status failed it for good", d.tenant, d.messageID))
		}
	}
	for d := range want {
		if !got[d] {
			dlWrong = append(dlWrong, fmt.Sprintf("tenant %d message %.80q failed for good, but is not a dead letter", d.tenant, d.messageID))
		}
	}
	if in.dlErr != nil {
		dlWrong = append(dlWrong, "could not list dead letters: "+in.dlErr.Error())
	}
	sort.Strings(dlWrong)
	rep.add("dead letters = the provider's permanent failures and Meta's failed statuses", len(dlWrong) == 0 && rep.deadLettered == rep.permanentFailed+len(failsLater),
		fmt.Sprintf("%d dead letters, %d messages failed permanently by the provider (%d chosen and accepted), %d taken and then reported failed", rep.deadLettered, rep.permanentFailed, len(permanent), len(failsLater)), dlWrong...)

	// 6b. ordo's own view agrees with the provider's.
	rep.add("ordo shows every accepted message finished", len(in.unfinished) == 0,
		fmt.Sprintf("%d accepted messages not done (or, for the chosen ones, dead) in GET /v1/messages", len(in.unfinished)), in.unfinished...)

	// 7. Bad input got the contract's answers.
	var badWrong []string
	runs := 0
	for _, b := range in.bad {
		runs += b.runs
		if b.wrong > 0 || b.runs == 0 {
			badWrong = append(badWrong, fmt.Sprintf("%s: %d of %d wrong; first: %s", b.name, b.wrong, b.runs, b.firstWrong))
		}
	}
	rep.add("bad input gets the contract's error and stores nothing", len(badWrong) == 0 && len(in.bad) > 0,
		fmt.Sprintf("%d cases, %d requests", len(in.bad), runs), badWrong...)

	// 8. Secrets went where they belong.
	rep.add("each tenant's credential and handler secret used for it alone", in.provider.wrongToken == 0 && in.handler.badSignature == 0 && in.handler.badKey == 0,
		fmt.Sprintf("%d sends with another token; of %d handler calls, %d with a bad signature, %d with a wrong Idempotency-Key",
			in.provider.wrongToken, in.handler.calls, in.handler.badSignature, in.handler.badKey))

	// 8b. Meta's side could report every delivery.
	rep.add("every status webhook answered 200", in.meta.unanswered == 0 && len(in.meta.refused) == 0 && in.meta.sent == in.meta.taken && in.meta.taken > 0,
		fmt.Sprintf("%d of %d deliveries reported (%d retries after errors), %d unanswered, %d refused", in.meta.sent, in.meta.taken, in.meta.retries, in.meta.unanswered, len(in.meta.refused)),
		in.meta.refused...)

	// 9. Every kind of fault happened.
	var missing []string
	kinds := []string{faultWorkerKill, faultAPIKill, faultPGRestart, faultWorkerStall,
		faultProvider500, faultProviderTimeout, faultProviderDelivered, faultProviderPairRate, faultProviderPermanent}
	if in.ha {
		// The failovers take the Postgres restarts' place.
		kinds = slices.DeleteFunc(kinds, func(k string) bool { return k == faultPGRestart })
		kinds = append(kinds, faultHAPrimaryKill, faultHASwitchover, faultHAStandbyRestart)
	}
	for _, k := range kinds {
		if rep.faults[k] == 0 {
			missing = append(missing, k+" never happened")
		}
	}
	for k, n := range in.planned {
		if in.faults[k] < n && k != faultWorkerKill { // a worker kill finding no worker up is skipped
			missing = append(missing, fmt.Sprintf("%s: %d of %d planned", k, in.faults[k], n))
		}
	}
	judgePartitions(rep, in)
	judgeUpgrade(rep, in)
	rep.add("every kind of fault injected", len(missing) == 0, chaosFaultSummary(rep.faults), missing...)
	if in.ha {
		judgeFailovers(rep, in)
	}

	// 10. The system settled, and no process crashed on its own.
	rep.add("settled after the load", in.settled,
		fmt.Sprintf("every accepted message sent or dead-lettered within %s of the end of the load (bound %s)", in.waited.Round(time.Millisecond), in.quiesce))
	rep.add("no panic, data race or deadlock", len(in.logProblems) == 0,
		fmt.Sprintf("%d found in the processes' and Postgres's logs", len(in.logProblems)), in.logProblems...)
	return rep
}

func chaosFaultSummary(f map[string]int) string {
	kinds := []string{faultWorkerKill, faultAPIKill, faultPGRestart, faultWorkerStall,
		faultProvider500, faultProviderTimeout, faultProviderDelivered, faultProviderPairRate, faultProviderPermanent}
	for _, k := range []string{faultRollingDeploy, faultUpgrade, faultOperatorResolve, faultHostileFlood, faultPGAway, faultHandlerOutage, faultHAPrimaryKill, faultHASwitchover, faultHAStandbyRestart,
		faultWorkerDBCut, faultWorkerAPICut, faultPGSlow, faultCloudAPIOutage} {
		if f[k] > 0 { // optional kinds: named only when the run had them
			kinds = append(kinds, k)
		}
	}
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, f[k]))
	}
	return strings.Join(parts, " ")
}

// print writes the report; its last line is "N passed, N failed".
func (r *Report) print(w io.Writer) {
	fmt.Fprintln(w, "\nchecks:")
	for _, c := range r.checks {
		verdict := "PASS"
		if !c.ok {
			verdict = "FAIL"
		}
		fmt.Fprintf(w, "  %s  %-55s %s\n", verdict, c.name, c.summary)
		if !c.ok {
			for _, d := range c.details {
				fmt.Fprintf(w, "          %s\n", d)
			}
		}
	}
	if len(r.notes) > 0 {
		fmt.Fprintln(w, "\nfailovers:")
		for _, n := range r.notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	fmt.Fprintf(w, "\naccepted=%d sent=%d lost=%d order_violations=%d duplicates=%d ambiguous_counted=%d duplicates_beyond_ambiguous=%d dead_lettered=%d provider_permanent=%d unexpected=%d\n",
		r.accepted, r.sent, r.lost, r.orderViolations, r.duplicates, r.ambiguousCounted, r.beyondAmbiguous, r.deadLettered, r.permanentFailed, r.unexpected)
	fmt.Fprintf(w, "faults: %s\n", chaosFaultSummary(r.faults))
	for _, h := range r.hostile {
		fmt.Fprintf(w, "hostile flood: %s\n", h)
	}
	fmt.Fprintf(w, "%d passed, %d failed\n", len(r.checks)-r.Failed(), r.Failed())
}

// Checks is how many checks the report holds.
func (r *Report) Checks() int { return len(r.checks) }

// deployGap widens each fault window: a send's request reaches the
// provider a moment before or after the signal the process is handling.
const deployGap = 500 * time.Millisecond

// windowDuplicates lists the texts delivered more than once whose first
// delivery came inside a fault's window (a process shutting down in a
// deploy: from the provider's hold before SIGTERM to the exit; an
// operator's replay or skip), leaving out those the provider itself made
// ambiguous (answered with a fault after delivering). Such faults run alone
// (no kill, stall or Postgres restart inside their windows), so such a
// duplicate is theirs: a send cut off before its result was recorded, or
// fenced out, then sent again. Under either ambiguous policy it fails the
// run; the detail names the tenant's policy.
func windowDuplicates(sends []chaosSend, deploys []faultWindow, faulted map[string]bool, pnids []string, policies []string) []string {
	type first struct {
		at time.Time
		n  int
	}
	seen := make(map[string]*first)
	var keys []string
	for _, s := range sends {
		k := chaosSendKey(s.PhoneNumberID, s.To, s.Text)
		f := seen[k]
		if f == nil {
			f = &first{at: s.At}
			seen[k] = f
			keys = append(keys, k)
		}
		if s.At.Before(f.at) {
			f.at = s.At
		}
		f.n++
	}
	policyOf := make(map[string]string, len(pnids))
	for i, p := range pnids {
		if i < len(policies) {
			policyOf[p] = policies[i]
		}
	}
	var out []string
	for _, k := range keys {
		f := seen[k]
		if f.n < 2 || faulted[k] {
			continue
		}
		for _, w := range deploys {
			if f.at.After(w.from.Add(-deployGap)) && f.at.Before(w.exit.Add(deployGap)) {
				pnid, _, _ := strings.Cut(k, "\x00")
				out = append(out, fmt.Sprintf("%q delivered %d times, first while %s (tenant policy %s)",
					strings.ReplaceAll(k, "\x00", " "), f.n, w.what, policyOf[pnid]))
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// deployStall is the longest gap between two consecutive sends to one
// conversation (business number and user) that overlaps a process's
// shutdown in a deploy, and the conversation: how long a deploy held a
// conversation up.
func deployStall(sends []chaosSend, deploys []faultWindow) (time.Duration, string) {
	last := make(map[string]time.Time)
	var (
		longest time.Duration
		which   string
	)
	for _, s := range sends {
		k := s.PhoneNumberID + " " + s.To
		if prev, ok := last[k]; ok {
			for _, w := range deploys {
				if prev.Before(w.exit) && s.At.After(w.term) {
					if gap := s.At.Sub(prev); gap > longest {
						longest, which = gap, k
					}
					break
				}
			}
		}
		if prev, ok := last[k]; !ok || s.At.After(prev) {
			last[k] = s.At
		}
	}
	return longest, which
}
