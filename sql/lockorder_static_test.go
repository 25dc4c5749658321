package sql_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// lockLevels is sql/LOCKING.md's order: a path takes each level's rows
// before the next level's (a tenant's dependency rows come right after the
// tenant row: level 1.5, "1b" there). Tables not listed (events, leases, sandbox
// sends, keys, credentials) are outside the order: LOCKING.md says why each
// touches nothing else.
var lockLevels = map[string]float64{
	"tenants": 1, "dependencies": 1.5, "conversations": 2, "send_pacing": 3, "steps": 4,
	"messages": 5, "dead_letters": 6, "ready": 7, "river_job": 8, "audit_log": 9,
}

// lockOrderExceptions are the functions LOCKING.md lets skip or reverse the
// order, with its reason.
var lockOrderExceptions = map[string]string{
	"prune_messages":      "maintenance: locks finished messages below their head (no drain touches them), then their dead letters and steps",
	"purge_conversations": "maintenance: conversations FOR UPDATE in id order first (a CTE), then by cascade; its statements read bottom-up",
}

// newRowsOnly are the tables a function touches only by inserting rows that
// belong to a row it inserted itself, in the same transaction: nobody else
// can see, lock or wait for them, so they take no place in its order.
var newRowsOnly = map[string]string{
	"enqueue_message": "steps", // an SQL message's unchecked send step, after the message
}

var (
	sqlComment   = regexp.MustCompile(`--[^\n]*`)
	sqlFuncName  = regexp.MustCompile(`(?i)CREATE OR REPLACE FUNCTION ordo\.(\w+)`)
	sqlTouch     = regexp.MustCompile(`(?i)\b(?:UPDATE\s+ordo\.(\w+)|DELETE\s+FROM\s+ordo\.(\w+)|INSERT\s+INTO\s+ordo\.(\w+)|ordo\.(\w+)\s*\()`)
	sqlForUpdate = regexp.MustCompile(`(?i)FOR\s+(?:NO\s+KEY\s+)?UPDATE(?:\s+OF\s+(\w+))?`)
	sqlFromTable = regexp.MustCompile(`(?i)\b(?:FROM|JOIN)\s+ordo\.(\w+)(?:\s+(?:AS\s+)?(\w+))?`)
)

// touches lists, in the order a function's text takes them, the tables it
// locks rows of (UPDATE, DELETE, INSERT, SELECT … FOR UPDATE) and the ordo
// functions it calls.
func touches(body string) []string {
	var out []string
	for _, stmt := range strings.Split(sqlComment.ReplaceAllString(body, ""), ";") {
		type hit struct {
			at   int
			name string
		}
		var hits []hit
		for _, m := range sqlTouch.FindAllStringSubmatchIndex(stmt, -1) {
			for g := 1; g <= 4; g++ {
				if m[2*g] >= 0 {
					name := stmt[m[2*g]:m[2*g+1]]
					if g == 4 {
						name = "()" + name
					}
					hits = append(hits, hit{m[0], name})
				}
			}
		}
		if fu := sqlForUpdate.FindStringSubmatchIndex(stmt); fu != nil {
			alias := ""
			if fu[2] >= 0 {
				alias = stmt[fu[2]:fu[3]]
			}
			for _, f := range sqlFromTable.FindAllStringSubmatchIndex(stmt, -1) {
				table, as := stmt[f[2]:f[3]], ""
				if f[4] >= 0 {
					as = stmt[f[4]:f[5]]
				}
				if alias == "" || strings.EqualFold(as, alias) {
					hits = append(hits, hit{f[0], table})
					break
				}
			}
		}
		sort.SliceStable(hits, func(i, j int) bool { return hits[i].at < hits[j].at })
		for _, h := range hits {
			out = append(out, h.name)
		}
	}
	return out
}

// lockOrderViolations checks functions (name → body) against lockLevels:
// each table's first lock, calls inlined, must not come after a lock of a
// later level. Touching a table again later is its row, already held.
func lockOrderViolations(funcs map[string]string) []string {
	var expand func(name string, seen map[string]bool) []string
	expand = func(name string, seen map[string]bool) []string {
		if seen[name] {
			return nil
		}
		seen[name] = true
		var tables []string
		for _, t := range touches(funcs[name]) {
			if newRowsOnly[name] == t {
				continue
			}
			if callee, ok := strings.CutPrefix(t, "()"); ok {
				if _, known := funcs[callee]; known && callee != name {
					tables = append(tables, expand(callee, seen)...)
				}
				continue
			}
			tables = append(tables, t)
		}
		seen[name] = false
		return tables
	}
	var out []string
	for name := range funcs {
		if _, ok := lockOrderExceptions[name]; ok {
			continue
		}
		held, top, topTable := map[string]bool{}, 0.0, ""
		for _, t := range expand(name, map[string]bool{}) {
			level, ordered := lockLevels[t]
			if !ordered || held[t] {
				continue
			}
			held[t] = true
			if level < top {
				out = append(out, fmt.Sprintf("ordo.%s locks %s (level %g) after %s (level %g)", name, t, level, topTable, top))
			}
			if level > top {
				top, topTable = level, t
			}
		}
	}
	sort.Strings(out)
	return out
}

// Every SQL function takes its row locks in sql/LOCKING.md's order, as far
// as its text shows (a static check: each table's first lock, with the
// functions it calls inlined). A function that goes back up the order fails
// here before it deadlocks under load.
func TestFunctionsTakeLocksInTheWrittenOrder(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("functions/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no function files: %v", err)
	}
	funcs := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m := sqlFuncName.FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s: no CREATE OR REPLACE FUNCTION ordo.…", f)
		}
		funcs[string(m[1])] = string(b)
	}
	for _, v := range lockOrderViolations(funcs) {
		t.Error(v)
	}
	// The check can fail: a function that writes a step before its
	// conversation, or calls one that does after a later level, or takes a
	// dependency's row after a conversation's.
	bad := map[string]string{
		"step_then_conv":   `UPDATE ordo.steps SET status = 'x'; PERFORM 1 FROM ordo.conversations c WHERE c.id = 1 FOR NO KEY UPDATE;`,
		"ready_then_fence": `UPDATE ordo.ready SET due_at = now(); PERFORM ordo.check_fence(1, 2);`,
		"check_fence":      funcs["check_fence"],
		// A dependency's row after a conversation's: back up the order.
		"conv_then_dependency": `PERFORM ordo.check_fence(1, 2); PERFORM ordo.dependency_back(1, 'handler');`,
		"dependency_back":      funcs["dependency_back"],
		"wake_waiting":         funcs["wake_waiting"],
	}
	if got := lockOrderViolations(bad); len(got) != 3 {
		t.Fatalf("the check found %d violations in three bad functions: %v", len(got), got)
	}
}
