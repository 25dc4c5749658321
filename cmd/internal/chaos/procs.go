package chaos

// The ordo processes of a run, as the faults and the checker see them: how
// they are started (package proc supervises them), operator commands, their
// logs and Postgres's.

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
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/cmd/internal/proc"
)

// newProc is one ordo process the run kills, stalls and restarts. A
// process that exits on its own (it may refuse to start while Postgres
// restarts) is restarted after a second and counted.
func (r *run) newProc(dir, name string, args ...string) *proc.Proc {
	// application_name tells the process's database sessions apart, so a
	// stall can pick the worker that holds the most conversations.
	env := append(append([]string(nil), r.env...), "DATABASE_URL="+r.procDBURL(name)+"&application_name="+name)
	if url := r.procProviderURL(name); url != "" {
		env = append(env, "ORDO_WHATSAPP_API_URL="+url)
	}
	return proc.New(proc.Config{
		Name:         name,
		Argv:         append(r.command(), args...),
		Env:          env,
		LogPath:      filepath.Join(dir, name+".log"),
		RestartAfter: time.Second,
		Logf:         r.log.printf,
	})
}

// command is the build's command the run is on (a copy).
func (r *run) command() []string {
	r.buildMu.Lock()
	defer r.buildMu.Unlock()
	return append([]string(nil), r.build...)
}

// stopAll terminates every ordo process; safe to call twice.
func (r *run) stopAll() {
	var wg sync.WaitGroup
	for _, p := range append([]*proc.Proc{r.api}, r.workers...) {
		if p != nil {
			wg.Add(1)
			go func() { defer wg.Done(); _ = p.Stop(20 * time.Second) }()
		}
	}
	wg.Wait()
	r.closeProxies()
	if r.provider != nil {
		r.provider.Close()
	}
	if r.handler != nil {
		r.handler.Close()
	}
}

// ordo runs an ordo operator command of the build the run is on to
// completion and returns its stdout.
func (r *run) ordo(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	return r.ordoRun(ctx, r.command(), stdin, args...)
}

// ordoWith runs an operator command of the build command.
func (r *run) ordoWith(ctx context.Context, command []string, args ...string) ([]byte, error) {
	return r.ordoRun(ctx, command, nil, args...)
}

func (r *run) ordoRun(ctx context.Context, command []string, stdin []byte, args ...string) ([]byte, error) {
	argv := append(append([]string(nil), command...), args...)
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
func (r *run) waitAPI(ctx context.Context, limit time.Duration) error {
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
			return fmt.Errorf("the API process did not become ready within %s (see %s)", limit, r.api.LogPath())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logProblems lists what no process may ever print: a panic, a Go fatal
// error, a data race (the test runs race-enabled processes).
func (r *run) logProblems() []string {
	var out []string
	for _, p := range append([]*proc.Proc{r.api}, r.workers...) {
		if p == nil {
			continue
		}
		f, err := os.Open(p.LogPath())
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:") || strings.Contains(line, "WARNING: DATA RACE") {
				out = append(out, p.Name()+": "+line)
			}
		}
		f.Close()
	}
	return append(out, r.postgresErrors()...)
}

// benignPostgresErrors are the errors Postgres logs in a good run: the
// ingest function refusing the prober's bad input, a statement cancelled
// by a client that went away (a killed process, a timeout), a stale fence,
// and ingest's bounded lock wait (engine.LockTimeout: only ingest sets
// lock_timeout, and the message is answered 503 with Retry-After, which the
// clients retry; "every offer answered 2xx" still holds them to an answer).
var benignPostgresErrors = []string{
	"conversation_id: ", "message_id: ", "direction: ", "payload: ",
	"canceling statement due to user request",
	"stale fencing token",
	"canceling statement due to lock timeout",
}

// haBenignPostgresErrors are, in an HA run (--ha), errors of the HA
// manager's own making: right after a promotion a standby (the old primary
// rejoining) asks the new primary for its replication slot before the new
// primary's Patroni created it, and its walreceiver tries again; and
// Patroni, naming the synchronous standbys on a node whose promotion is not
// yet complete, runs its `SELECT txid_current()` (to make WAL traffic)
// there (patroni/postgresql/sync.py).
var haBenignPostgresErrors = []string{`replication slot "node`, "cannot execute pg_current_xact_id() during recovery"}

// postgresErrors lists the errors in Postgres's log that no good run has: a
// deadlock above all, which Postgres breaks by failing one side.
func (r *run) postgresErrors() []string {
	benign := benignPostgresErrors
	if r.ha != nil {
		benign = append(slices.Clone(benign), haBenignPostgresErrors...)
	}
	var out []string
	for _, path := range r.postgresLogs() {
		f, err := os.Open(path)
		if err != nil {
			out = append(out, path+": "+err.Error())
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			_, msg, ok := strings.Cut(sc.Text(), " ERROR:  ")
			if !ok || slices.ContainsFunc(benign, func(b string) bool { return strings.HasPrefix(msg, b) }) {
				continue
			}
			out = append(out, "postgres: ERROR: "+msg)
		}
		f.Close()
	}
	return out
}

// heldConversations counts, per process, the conversation locks its drains
// hold now; empty if the database cannot tell.
func (r *run) heldConversations(ctx context.Context) map[string]int {
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
