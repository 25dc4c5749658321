package chaos

// The run's process faults, as etcd's functional tester has them: each kind
// is a small type in a file of its own (fault_*.go) that plans its
// injections and knows how to inject and recover one; this file holds what
// they share — the interface, the seeded plan and the loop that carries it
// out. The provider's faults are decided per request (provider.go).

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"
)

// fault is one planned injection of one kind of fault.
type fault interface {
	// Kind names the fault's kind in the plan, the log and the report.
	Kind() string
	// Desc says what this injection does, for the plan's listing.
	Desc() string
	// slot is when the fault is injected, from the start of the load, and
	// how long it lasts before Recover.
	slot() slot
	// Inject breaks something and logs it; false if there was nothing to
	// break (every worker down), and then Recover is not called.
	Inject(ctx context.Context, r *run) bool
	// Recover puts back what Inject broke: restarts, resumes, checks.
	Recover(ctx context.Context, r *run)
}

// exclusive is a fault that runs alone: no other process fault is between
// its Inject and Recover while it is between its own, so that what the
// checker sees in its window is its doing (a rolling deploy).
type exclusive interface {
	exclusive()
}

// independent is a fault that takes no part in the exclusion: it breaks
// something outside ordo's processes and Postgres (a tenant's handler) for
// long, and neither waits for an exclusive fault nor holds one up.
type independent interface {
	independent()
}

// skippable is a periodic fault that is skipped, rather than delayed, when
// an exclusive fault is under way at its time: delayed ones would all
// strike at once when it ends (every worker killed together).
type skippable interface {
	skippable()
}

// slot is a fault's place in the plan.
type slot struct {
	at     time.Duration // from the start of the load
	pause  time.Duration // between Inject and Recover
	target int           // the worker it aims at (the next one up if that one is not)
}

// faultKind is one kind of fault and how the plan places it. The order of
// faultKinds is the order in which the kinds draw from the seed, so a seed
// keeps its plan when a kind is added at the end.
type faultKind struct {
	name string
	// plan returns the kind's injections for the run; n is how many the
	// configuration asks for (ignored by periodic kinds).
	plan func(p *planner) []fault
	// summary names n injections for the plan line ("3 worker kills"); an
	// optional kind (summary "" for 0) is left out when none is planned.
	summary func(n int) string
}

// faultKinds lists every kind of process fault. A new kind is a new
// fault_*.go file and a line here.
var faultKinds = []faultKind{
	workerKillKind,
	pgRestartKind,
	workerStallKind,
	apiKillKind,
	rollingDeployKind,
	operatorResolveKind,
	hostileFloodKind,
	haPrimaryKillKind,
	haSwitchoverKind,
	haStandbyRestartKind,
	handlerOutageKind, // before pgAwayKind, which keeps out of its way
	pgAwayKind,
	workerDBCutKind,
	workerAPICutKind,
	pgSlowKind,
	cloudAPIOutageKind,
	upgradeKind,
}

// planner draws the plan from the seed: the periodic faults first, then the
// rarer ones, kept apart from each other so that each one's effect is its
// own.
type planner struct {
	cfg     Config
	rng     *rand.Rand
	special []time.Duration
	// handlerOutage is the handler outage's slot once planned.
	handlerOutage *slot
	// cloudAPIOutage is the Cloud API outage's slot once planned.
	cloudAPIOutage *slot
}

// between is a random duration in [lo, hi).
func (p *planner) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(p.rng.Int64N(int64(hi-lo)))
}

// place plans n injections of a rare fault between a tenth of the run and
// latest, at least 6s from the other rare ones; pause gives each one's
// length and mk makes it.
func (p *planner) place(n int, latest time.Duration, pause func() time.Duration, mk func(slot) fault) []fault {
	var out []fault
	earliest := max(3*time.Second, p.cfg.Duration/10)
	for range n {
		at := p.between(earliest, latest)
		for try := 0; try < 50 && near(at, p.special, 6*time.Second); try++ {
			at = p.between(earliest, latest)
		}
		p.special = append(p.special, at)
		out = append(out, mk(slot{at: at, target: p.rng.IntN(p.cfg.Workers), pause: pause()}))
	}
	return out
}

func near(at time.Duration, others []time.Duration, gap time.Duration) bool {
	for _, o := range others {
		if d := at - o; d < gap && d > -gap {
			return true
		}
	}
	return false
}

// faultPlan is the seeded schedule of process faults, in time order.
type faultPlan struct {
	faults []fault
}

func newFaultPlan(cfg Config) *faultPlan {
	p := &planner{cfg: cfg, rng: chaosRand(cfg.Seed, 1)}
	plan := &faultPlan{}
	for _, k := range faultKinds {
		plan.faults = append(plan.faults, k.plan(p)...)
	}
	sort.SliceStable(plan.faults, func(i, j int) bool { return plan.faults[i].slot().at < plan.faults[j].slot().at })
	return plan
}

// kinds counts the planned faults per kind.
func (p *faultPlan) kinds() map[string]int {
	out := make(map[string]int)
	for _, f := range p.faults {
		out[f.Kind()]++
	}
	return out
}

// planShown is the order in which the plan line names the kinds.
var planShown = []string{faultWorkerKill, faultAPIKill, faultPGRestart, faultWorkerStall, faultRollingDeploy, faultUpgrade, faultOperatorResolve, faultHostileFlood,
	faultPGAway, faultHandlerOutage, faultHAPrimaryKill, faultHASwitchover, faultHAStandbyRestart, faultWorkerDBCut, faultWorkerAPICut, faultPGSlow, faultCloudAPIOutage}

func (p *faultPlan) print(l *faultLog) {
	k := p.kinds()
	var parts []string
	for _, name := range planShown {
		for _, kind := range faultKinds {
			if kind.name == name {
				if s := kind.summary(k[name]); s != "" {
					parts = append(parts, s)
				}
			}
		}
	}
	l.printf("fault plan: %s; the provider fails 5%% with 500, 2%% with a timeout after reading (half of them delivered), 1%% with pair-rate 131056, and the chosen messages with 131026",
		strings.Join(parts, ", "))
}

// runFaults injects the plan's faults at their times and returns once every
// process is back: killed ones restarted, stalled ones resumed, Postgres up.
func (r *run) runFaults(ctx context.Context, plan *faultPlan) {
	var (
		wg    sync.WaitGroup
		alone sync.RWMutex // held for writing by an exclusive fault
	)
	defer wg.Wait()
	for _, f := range plan.faults {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(r.start.Add(f.slot().at))):
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, excl := f.(exclusive)
			_, skip := f.(skippable)
			_, indep := f.(independent)
			switch {
			case indep:
			case excl:
				alone.Lock()
				defer alone.Unlock()
			case skip:
				if !alone.TryRLock() {
					r.log.printf("%s skipped: an exclusive fault is under way", f.Kind())
					return
				}
				defer alone.RUnlock()
			default:
				alone.RLock()
				defer alone.RUnlock()
			}
			began := time.Now()
			if !f.Inject(ctx, r) {
				return
			}
			time.Sleep(f.slot().pause)
			f.Recover(ctx, r)
			r.windowMu.Lock()
			if excl {
				r.exclusives = append(r.exclusives, exclusiveSpan{kind: f.Kind(), from: began, to: time.Now()})
			}
			r.spans = append(r.spans, faultSpan{kind: f.Kind(), what: f.Desc(), from: began, to: time.Now()})
			if !indep {
				r.settled = time.Now()
			}
			r.windowMu.Unlock()
		}()
	}
}

// faultSpan is one injected fault, from its injection to the end of its
// recovery (a failover's: the cluster healthy and ordo writing again): the
// checker names the spans a failing message's tries fell in.
type faultSpan struct {
	kind, what string
	from, to   time.Time
}

// faultSpans returns the faults injected so far.
func (r *run) faultSpans() []faultSpan {
	r.windowMu.Lock()
	defer r.windowMu.Unlock()
	return append([]faultSpan(nil), r.spans...)
}

// faultLog prints timestamped lines and counts the faults injected.
type faultLog struct {
	w     io.Writer
	start time.Time

	mu     sync.Mutex
	faults map[string]int
}

func (l *faultLog) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "[+%8.3fs] %s\n", time.Since(l.start).Seconds(), fmt.Sprintf(format, args...))
}

// fault logs an injected fault and counts it.
func (l *faultLog) fault(kind, format string, args ...any) {
	l.mu.Lock()
	if l.faults == nil {
		l.faults = make(map[string]int)
	}
	l.faults[kind]++
	l.mu.Unlock()
	l.printf("fault %s: %s", kind, fmt.Sprintf(format, args...))
}

func (l *faultLog) counts() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.faults))
	for k, v := range l.faults {
		out[k] = v
	}
	return out
}
