package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Fault kinds, as the fault log and the report name them.
const (
	faultWorkerKill  = "worker_kill"  // kill -9 of a worker, restarted after a pause
	faultAPIKill     = "api_kill"     // kill -9 of the API process, restarted after a pause
	faultPGRestart   = "pg_restart"   // pg_ctl restart -m immediate
	faultWorkerStall = "worker_stall" // SIGSTOP of a worker past its lease, then SIGCONT
)

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

// chaosProc is one ordo process that the run kills, stalls and restarts. A
// process that exits on its own (it may refuse to start while Postgres
// restarts) is restarted after a second and counted.
type chaosProc struct {
	name    string
	argv    []string
	env     []string
	logPath string
	log     *faultLog

	mu         sync.Mutex
	cmd        *exec.Cmd // nil while down
	exited     chan struct{}
	stopped    bool // SIGSTOPped
	final      bool // shutting down: no more restarts
	starts     int
	unexpected int // exits nobody asked for
}

func (r *chaosRun) newProc(dir, name string, args ...string) *chaosProc {
	// application_name tells the process's database sessions apart, so a
	// stall can pick the worker that holds the most conversations.
	env := append(append([]string(nil), r.env...), "DATABASE_URL="+r.dbURL+"&application_name="+name)
	return &chaosProc{
		name:    name,
		argv:    append(append([]string(nil), r.cfg.Exec...), args...),
		env:     env,
		logPath: filepath.Join(dir, name+".log"),
		log:     r.log,
	}
}

func (p *chaosProc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.startLocked()
}

func (p *chaosProc) startLocked() error {
	if p.final || p.cmd != nil {
		return nil
	}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== %s start #%d at %s\n", p.name, p.starts+1, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = f, f
	// Should the run itself die, its processes die with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.stopped = cmd, exited, false
	p.starts++
	go p.watch(cmd, exited, f)
	return nil
}

// watch waits for one incarnation to exit and restarts it if nobody asked
// for the exit.
func (p *chaosProc) watch(cmd *exec.Cmd, exited chan struct{}, f *os.File) {
	err := cmd.Wait()
	fmt.Fprintf(f, "=== %s exited at %s: %v\n", p.name, time.Now().Format(time.RFC3339Nano), err)
	f.Close()
	p.mu.Lock()
	close(exited)
	unexpected := p.cmd == cmd // kill and terminate clear p.cmd first
	if unexpected {
		p.cmd = nil
		p.unexpected++
	}
	final := p.final
	p.mu.Unlock()
	if !unexpected || final {
		return
	}
	p.log.printf("%s exited on its own (%v); restarting it in 1s", p.name, err)
	time.Sleep(time.Second)
	if err := p.start(); err != nil {
		p.log.printf("restart %s: %v", p.name, err)
	}
}

// kill sends SIGKILL and waits for the exit; false if the process is down
// or stalled (a stall is its own fault and ends with SIGCONT).
func (p *chaosProc) kill() (pid int, ok bool) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	if cmd == nil || p.stopped || p.final {
		p.mu.Unlock()
		return 0, false
	}
	p.cmd = nil
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	return cmd.Process.Pid, true
}

// stall sends SIGSTOP; false if the process is down or already stalled.
func (p *chaosProc) stall() (pid int, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.stopped || p.final {
		return 0, false
	}
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return 0, false
	}
	p.stopped = true
	return p.cmd.Process.Pid, true
}

// resume sends SIGCONT to a stalled process.
func (p *chaosProc) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.stopped {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	p.stopped = false
}

// terminate stops the process for good: SIGTERM (a graceful shutdown),
// SIGKILL if it is not gone within 20s.
func (p *chaosProc) terminate() {
	p.mu.Lock()
	p.final = true
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
}

// stopAll terminates every ordo process; safe to call twice.
func (r *chaosRun) stopAll() {
	var wg sync.WaitGroup
	for _, p := range append([]*chaosProc{r.api}, r.workers...) {
		if p != nil {
			wg.Add(1)
			go func() { defer wg.Done(); p.terminate() }()
		}
	}
	wg.Wait()
	if r.provider != nil {
		r.provider.Close()
	}
	if r.handler != nil {
		r.handler.Close()
	}
}

// ordo runs an ordo operator command to completion and returns its stdout.
func (r *chaosRun) ordo(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	argv := append(append([]string(nil), r.cfg.Exec...), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = r.env
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("ordo %s: %w: %s", strings.Join(args[:min(2, len(args))], " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// waitAPI waits for the API process to answer /readyz.
func (r *chaosRun) waitAPI(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.apiURL+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the API process did not become ready within %s (see %s)", limit, r.api.logPath)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logProblems lists what no process may ever print: a panic, a Go fatal
// error, a data race (the test runs race-enabled processes).
func (r *chaosRun) logProblems() []string {
	var out []string
	for _, p := range append([]*chaosProc{r.api}, r.workers...) {
		if p == nil {
			continue
		}
		f, err := os.Open(p.logPath)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:") || strings.Contains(line, "WARNING: DATA RACE") {
				out = append(out, p.name+": "+line)
			}
		}
		f.Close()
	}
	return append(out, r.postgresErrors()...)
}

// benignPostgresErrors are the errors Postgres logs in a good run: the
// ingest function refusing the prober's bad input, a statement cancelled
// by a client that went away (a killed process, a timeout), a stale fence.
var benignPostgresErrors = []string{
	"conversation_id: ", "message_id: ", "direction: ", "payload: ",
	"canceling statement due to user request",
	"stale fencing token",
}

// postgresErrors lists the errors in Postgres's log that no good run has: a
// deadlock above all, which Postgres breaks by failing one side.
func (r *chaosRun) postgresErrors() []string {
	if r.cluster == nil {
		return nil
	}
	f, err := os.Open(filepath.Join(r.cluster.Dir, "postgres.log"))
	if err != nil {
		return []string{"postgres.log: " + err.Error()}
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		_, msg, ok := strings.Cut(sc.Text(), " ERROR:  ")
		if !ok || slices.ContainsFunc(benignPostgresErrors, func(b string) bool { return strings.HasPrefix(msg, b) }) {
			continue
		}
		out = append(out, "postgres: ERROR: "+msg)
	}
	return out
}

// faultEvent is one planned fault. pause is how long a killed process stays
// down, or how long a stall lasts.
type faultEvent struct {
	at     time.Duration
	kind   string
	target int
	pause  time.Duration
}

// faultPlan is the seeded schedule of process faults. The provider's faults
// are decided per request (chaos_provider.go).
type faultPlan struct {
	events []faultEvent
}

func newFaultPlan(cfg chaosConfig) *faultPlan {
	rng := chaosRand(cfg.Seed, 1)
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	p := &faultPlan{}
	for at := between(2*time.Second, cfg.WorkerKillMax); at < cfg.Duration-time.Second; at += between(cfg.WorkerKillMin, cfg.WorkerKillMax) {
		p.events = append(p.events, faultEvent{at: at, kind: faultWorkerKill, target: rng.IntN(cfg.Workers), pause: between(500*time.Millisecond, 3*time.Second)})
	}
	// The rarer faults are kept apart from each other, so each one's effect
	// is its own.
	var special []time.Duration
	place := func(kind string, n int, latest time.Duration, pause func() time.Duration) {
		earliest := max(3*time.Second, cfg.Duration/10)
		for range n {
			at := between(earliest, latest)
			for try := 0; try < 50 && chaosNear(at, special, 6*time.Second); try++ {
				at = between(earliest, latest)
			}
			special = append(special, at)
			p.events = append(p.events, faultEvent{at: at, kind: kind, target: rng.IntN(cfg.Workers), pause: pause()})
		}
	}
	place(faultPGRestart, cfg.PGRestarts, cfg.Duration-5*time.Second, func() time.Duration { return 0 })
	place(faultWorkerStall, cfg.Stalls, cfg.Duration-cfg.stallFor()-time.Second, func() time.Duration { return cfg.stallFor() })
	place(faultAPIKill, cfg.APIKills, cfg.Duration-3*time.Second, func() time.Duration { return between(300*time.Millisecond, 2*time.Second) })
	sort.SliceStable(p.events, func(i, j int) bool { return p.events[i].at < p.events[j].at })
	return p
}

func chaosNear(at time.Duration, others []time.Duration, gap time.Duration) bool {
	for _, o := range others {
		if d := at - o; d < gap && d > -gap {
			return true
		}
	}
	return false
}

// kinds counts the planned faults per kind.
func (p *faultPlan) kinds() map[string]int {
	out := make(map[string]int)
	for _, e := range p.events {
		out[e.kind]++
	}
	return out
}

func (p *faultPlan) print(l *faultLog) {
	k := p.kinds()
	l.printf("fault plan: %d worker kills, %d API kills, %d Postgres restarts, %d worker stalls; the provider fails 5%% with 500, 2%% with a timeout after reading (half of them delivered), 1%% with pair-rate 131056, and the chosen messages with 131026",
		k[faultWorkerKill], k[faultAPIKill], k[faultPGRestart], k[faultWorkerStall])
}

// runFaults injects the plan's faults at their times and returns once every
// process is back: killed ones restarted, stalled ones resumed, Postgres up.
func (r *chaosRun) runFaults(ctx context.Context, plan *faultPlan) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, e := range plan.events {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(r.start.Add(e.at))):
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.inject(ctx, e)
		}()
	}
}

func (r *chaosRun) inject(ctx context.Context, e faultEvent) {
	switch e.kind {
	case faultWorkerKill:
		// The planned worker, or the next one that is up and not stalled.
		for i := range r.workers {
			w := r.workers[(e.target+i)%len(r.workers)]
			if pid, ok := w.kill(); ok {
				r.log.fault(e.kind, "kill -9 %s (pid %d); restart in %s", w.name, pid, e.pause)
				time.Sleep(e.pause)
				if err := w.start(); err != nil {
					r.log.printf("restart %s: %v", w.name, err)
				}
				return
			}
		}
		r.log.printf("worker kill skipped: no worker up")
	case faultAPIKill:
		if pid, ok := r.api.kill(); ok {
			r.log.fault(e.kind, "kill -9 api (pid %d); restart in %s", pid, e.pause)
			time.Sleep(e.pause)
			if err := r.api.start(); err != nil {
				r.log.printf("restart api: %v", err)
			}
		}
	case faultPGRestart:
		r.log.fault(e.kind, "pg_ctl restart -m immediate")
		start := time.Now()
		if err := r.cluster.Restart(ctx, true); err != nil {
			r.log.printf("postgres restart failed: %v", err)
			return
		}
		r.log.printf("postgres is back after %s", time.Since(start).Round(time.Millisecond))
	case faultWorkerStall:
		// Stall a worker in the middle of its work: slow the provider down
		// for a moment so that drains are waiting on sends, then stop the
		// worker holding the most conversations.
		r.provider.slowDown(time.Now().Add(2*time.Second), 700*time.Millisecond)
		time.Sleep(time.Second)
		held := r.heldConversations(ctx)
		order := make([]*chaosProc, 0, len(r.workers))
		for i := range r.workers {
			order = append(order, r.workers[(e.target+i)%len(r.workers)])
		}
		sort.SliceStable(order, func(i, j int) bool { return held[order[i].name] > held[order[j].name] })
		for _, w := range order {
			if pid, ok := w.stall(); ok {
				r.log.fault(e.kind, "SIGSTOP %s (pid %d) holding %d conversations, for %s (lease %s)", w.name, pid, held[w.name], e.pause, r.cfg.Lease)
				time.Sleep(e.pause)
				from := fileSizeOf(w.logPath)
				w.resume()
				r.log.printf("SIGCONT %s: its drains must find their fences moved", w.name)
				time.Sleep(3 * time.Second)
				r.log.printf("%s after SIGCONT: %s", w.name, summarizeLog(w.logPath, from))
				return
			}
		}
		r.log.printf("worker stall skipped: no worker up")
	}
}

// heldConversations counts, per process, the conversation locks its drains
// hold now; empty if the database cannot tell.
func (r *chaosRun) heldConversations(ctx context.Context) map[string]int {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.dbURL)
	if err != nil {
		return nil
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, _ := conn.Query(ctx, heldQuery, chaosLockNamespace)
	out := make(map[string]int)
	var (
		name string
		n    int
	)
	_, _ = pgx.ForEachRow(rows, []any{&name, &n}, func() error {
		out[name] = n
		return nil
	})
	return out
}

// chaosLockNamespace is the first key of the conversations' advisory locks
// (jobs.lockNamespace, "ordo").
const chaosLockNamespace = 0x6f72646f

const heldQuery = `
SELECT a.application_name, count(*)::int FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid::bigint = $1
GROUP BY 1`

func fileSizeOf(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// summarizeLog counts what a process logged from offset on, by level and
// message.
func summarizeLog(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return err.Error()
	}
	counts := make(map[string]int)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Level != "" {
			counts[line.Level+" "+line.Msg]++
		}
	}
	if len(counts) == 0 {
		return "nothing logged"
	}
	var parts []string
	for m, n := range counts {
		parts = append(parts, fmt.Sprintf("%d× %q", n, m))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
