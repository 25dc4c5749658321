package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/pgcluster"
	"github.com/ordo-dev/ordo/cmd/internal/proc"
)

// faultPGAway is Postgres stopped and held down while the load goes on and
// the clients retry: a state of the world every ordo loop must wait out
// quietly (contract: Failures), not an error each attempt logs.
const faultPGAway = "pg_away"

// Bounds the checker holds a Postgres outage to (issue 23).
const (
	// PGAwayDefault is how long Postgres stays down.
	PGAwayDefault = 20 * time.Second
	// PGAwayLinesMax is the most log lines, besides the access log, that
	// ordo's processes may write in any PGAwayLinesWindow of the outage.
	PGAwayLinesMax    = 60
	PGAwayLinesWindow = 15 * time.Second
	// PGAwayReadyWithin bounds the wait for /readyz 200 after Postgres is back.
	PGAwayReadyWithin = 10 * time.Second
)

// pgAwayKind stops Postgres once for Config.PGAway, out of the way of the
// handler outage's verdict (before it, inside its first part, or well
// after it), so that each fault's figures are its own.
var pgAwayKind = faultKind{
	name: faultPGAway,
	plan: func(p *planner) []fault {
		d := p.cfg.PGAway
		if p.cfg.HA || d <= 0 {
			return nil // HA: the failover faults take its place
		}
		earliest, latest := max(3*time.Second, p.cfg.Duration/10), p.cfg.Duration-d-5*time.Second
		ok := func(at time.Duration) bool {
			if near(at, p.special, 6*time.Second) {
				return false
			}
			h := p.handlerOutage
			if h == nil {
				return true
			}
			back := h.at + h.pause
			return at+d+5*time.Second <= h.at || // before it
				(at >= h.at+5*time.Second && at+d <= back-45*time.Second) || // inside, ending well before its return
				at >= back+HandledAfterBackMax+5*time.Second // after its verdict's window
		}
		for try := 0; try < 200; try++ {
			if at := p.between(earliest, latest); at <= latest && ok(at) {
				p.special = append(p.special, at)
				return []fault{&pgAway{s: slot{at: at, pause: d}}}
			}
		}
		return nil // no room in so short a run: the plan line leaves it out
	},
	summary: func(n int) string {
		if n == 0 {
			return ""
		}
		return fmt.Sprintf("%d Postgres outages", n)
	},
}

// pgAway is one outage of Postgres: pg_ctl stop -m fast, held down, started
// again. Meanwhile it polls /readyz; the clients' answers are recorded
// (run.answers) and the processes' logs read afterwards.
type pgAway struct {
	s    slot
	rec  pgAwayRecord
	stop chan struct{}
	done chan struct{}
	logs map[string]int64 // log path → size when Postgres went
}

func (f *pgAway) Kind() string { return faultPGAway }
func (f *pgAway) Desc() string { return fmt.Sprintf("stop Postgres for %s under load", f.s.pause) }
func (f *pgAway) slot() slot   { return f.s }
func (f *pgAway) exclusive()   {}

// Inject stops Postgres and starts watching /readyz.
func (f *pgAway) Inject(ctx context.Context, r *run) bool {
	f.logs = make(map[string]int64)
	for _, p := range r.procs() {
		f.logs[p.LogPath()] = fileSizeOf(p.LogPath())
	}
	r.answers.record(true)
	if err := r.cluster.Stop(ctx); err != nil {
		r.log.printf("postgres stop failed: %v", err)
		return false
	}
	f.rec.down = time.Now()
	r.log.fault(faultPGAway, "pg_ctl stop -m fast; back in %s", f.s.pause)
	f.stop, f.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(f.done)
		for {
			select {
			case <-f.stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			if readyz(ctx, r.apiURL) == http.StatusOK {
				f.rec.readyDuring++
			}
			f.rec.readyPolls++
		}
	}()
	return true
}

// Recover starts Postgres again, waits for /readyz 200 and for the logs of
// the outage to be complete, and records what it saw.
func (f *pgAway) Recover(ctx context.Context, r *run) {
	close(f.stop)
	<-f.done
	f.rec.up = time.Now() // from here the server is starting
	c, err := pgcluster.Start(ctx, pgcluster.Config{Dir: r.cluster.Dir, Port: r.cluster.Port, Fast: true, Settings: chaosPGSettings})
	if err != nil {
		f.rec.err = err.Error()
		r.log.printf("postgres start failed: %v", err)
		return
	}
	r.cluster = c
	r.log.printf("postgres is back after %s", time.Since(f.rec.down).Round(time.Millisecond))
	f.rec.readyAfter = -1
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if readyz(ctx, r.apiURL) == http.StatusOK {
			f.rec.readyAfter = time.Since(f.rec.up)
			break
		}
	}
	time.Sleep(time.Second) // the last lines of the outage reach the files
	f.rec.lines, f.rec.sample = outageLogLines(f.logs, f.rec.down, f.rec.up)
	f.rec.answers = r.answers.record(false)
	r.log.printf("postgres outage: %s", f.rec.describe())
	r.windowMu.Lock()
	r.pgAways = append(r.pgAways, f.rec)
	r.windowMu.Unlock()
}

// chaosPGSettings are the run's Postgres settings (synchronous_commit on:
// a 2xx is in the WAL before it is answered).
var chaosPGSettings = map[string]string{"synchronous_commit": "on", "max_connections": "400"}

// procs is every ordo process of the run.
func (r *run) procs() []*proc.Proc {
	return append([]*proc.Proc{r.api}, r.workers...)
}

// readyz is the API's /readyz status, 0 without an answer.
func readyz(ctx context.Context, api string) int {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// outageLogLines reads what the processes logged from the given offsets and
// returns the times of the lines stamped within [from, to], the access log
// ("http request") left out, and a few of their messages.
func outageLogLines(logs map[string]int64, from, to time.Time) ([]time.Time, []string) {
	var (
		out    []time.Time
		counts = make(map[string]int)
	)
	for path, off := range logs {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if _, err := f.Seek(off, 0); err == nil {
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				var l struct {
					Time time.Time `json:"time"`
					Msg  string    `json:"msg"`
				}
				if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg == "http request" || l.Time.Before(from) || l.Time.After(to) {
					continue
				}
				out = append(out, l.Time)
				counts[l.Msg]++
			}
		}
		f.Close()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	var sample []string
	for m, n := range counts {
		sample = append(sample, fmt.Sprintf("%dx %q", n, m))
	}
	sort.Strings(sample)
	return out, sample
}

// pgAwayRecord is what one Postgres outage left for the checker.
type pgAwayRecord struct {
	down, up                time.Time
	err                     string
	readyPolls, readyDuring int           // /readyz polls while down, and how many said 200
	readyAfter              time.Duration // from the start of Postgres to /readyz 200; -1 never
	lines                   []time.Time   // log lines besides the access log while down
	sample                  []string
	answers                 []apiAnswer
}

// busiest is the most log lines in any PGAwayLinesWindow of the outage.
func (p pgAwayRecord) busiest() int {
	most := 0
	for i, t := range p.lines {
		n := sort.Search(len(p.lines), func(j int) bool { return p.lines[j].After(t.Add(PGAwayLinesWindow)) }) - i
		most = max(most, n)
	}
	return most
}

// during counts the API's answers while Postgres was down: per status, and
// the 503s without Retry-After.
func (p pgAwayRecord) during() (per map[int]int, noRetryAfter int) {
	per = make(map[int]int)
	for _, a := range p.answers {
		if a.at.Before(p.down) || a.at.After(p.up) {
			continue
		}
		per[a.status]++
		if a.status == http.StatusServiceUnavailable && a.retryAfter == "" {
			noRetryAfter++
		}
	}
	return per, noRetryAfter
}

// resumed is from the start of Postgres to the first 2xx answer after it.
func (p pgAwayRecord) resumed() time.Duration {
	for _, a := range p.answers {
		if a.at.After(p.up) && a.status >= 200 && a.status < 300 {
			return a.at.Sub(p.up)
		}
	}
	return -1
}

func (p pgAwayRecord) describe() string {
	per, _ := p.during()
	var st []string
	for s, n := range per {
		st = append(st, fmt.Sprintf("%d×%d", n, s))
	}
	sort.Strings(st)
	return fmt.Sprintf("down %.1fs, %d log lines besides the access log (at most %d in %s), answers %s, /readyz 200 in %d of %d polls while down and %.1fs after the start, first 2xx %.1fs after",
		p.up.Sub(p.down).Seconds(), len(p.lines), p.busiest(), PGAwayLinesWindow, strings.Join(st, " "), p.readyDuring, p.readyPolls, p.readyAfter.Seconds(), p.resumed().Seconds())
}

func (p pgAwayRecord) problems() []string {
	var out []string
	if p.err != "" {
		return []string{"postgres did not start again: " + p.err}
	}
	if n := p.busiest(); n > PGAwayLinesMax {
		out = append(out, fmt.Sprintf("%d log lines in %s besides the access log (bound %d): %s", n, PGAwayLinesWindow, PGAwayLinesMax, strings.Join(p.sample, ", ")))
	}
	per, noRA := p.during()
	for s, n := range per {
		if s != http.StatusServiceUnavailable && s >= 500 {
			out = append(out, fmt.Sprintf("%d answers %d while Postgres was away (want 503 with Retry-After)", n, s))
		}
	}
	if noRA > 0 {
		out = append(out, fmt.Sprintf("%d answers 503 without Retry-After", noRA))
	}
	if per[http.StatusServiceUnavailable] == 0 {
		out = append(out, "no client was answered 503 while Postgres was away")
	}
	if p.readyDuring > 0 || p.readyPolls == 0 {
		out = append(out, fmt.Sprintf("/readyz said 200 in %d of %d polls while Postgres was away", p.readyDuring, p.readyPolls))
	}
	if p.readyAfter < 0 || p.readyAfter > PGAwayReadyWithin {
		out = append(out, fmt.Sprintf("/readyz 200 %.1fs after Postgres started (bound %s; -1: not within 30s)", p.readyAfter.Seconds(), PGAwayReadyWithin))
	}
	return out
}

// judgePGAways checks each Postgres outage: quiet logs, 503 with
// Retry-After (never 500), /readyz 503 meanwhile and 200 soon after.
func judgePGAways(rep *Report, in chaosInput) {
	if len(in.pgAways) == 0 {
		return
	}
	var problems, figures []string
	for _, p := range in.pgAways {
		problems = append(problems, p.problems()...)
		figures = append(figures, p.describe())
	}
	rep.add("Postgres away: quiet logs, 503 with Retry-After, /readyz", len(problems) == 0, strings.Join(figures, "; "), problems...)
}

// apiAnswer is one answer of the API to the clients, noted while recording.
type apiAnswer struct {
	at         time.Time
	status     int
	retryAfter string
}

// answerLog notes the API's answers to the clients while a Postgres outage
// is under way (and until it has recovered).
type answerLog struct {
	mu   sync.Mutex
	on   bool
	list []apiAnswer
}

// record turns noting on or off; turning it off returns and forgets what
// was noted.
func (a *answerLog) record(on bool) []apiAnswer {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.on = on
	out := a.list
	if !on {
		a.list = nil
	}
	return out
}

func (a *answerLog) add(resp *http.Response) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.on {
		a.list = append(a.list, apiAnswer{at: time.Now(), status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")})
	}
}
