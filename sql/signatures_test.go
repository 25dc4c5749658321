package sql_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/sql/sqltest"
)

// signaturesFile records the signature (arguments and result) of every
// SQL function ordo's Go code calls by name.
const signaturesFile = "signatures.txt"

var goCallsFunction = regexp.MustCompile(`ordo\.([a-z_]+)\(`)

// publicFunctions are called by other applications (the contract's SQL
// API), whatever ordo's own code calls.
var publicFunctions = []string{"enqueue_message", "enqueue_my_message"}

// A function's signature is what a running ordo process calls. A migration
// that changes one (sql/functions.go drops the old overload when its
// arguments change; Postgres cannot change a result in place) breaks every
// process of the previous version until it is restarted: during a rolling
// deploy, its drains and requests fail. So a change must be a decision:
// keep the old signature (a new argument with a DEFAULT, or a new function
// beside the old one for a release) or accept the break and say so in the
// upgrade notes. This test fails on any change to a called function's
// signature until signatures.txt says it was meant.
func TestCalledFunctionSignaturesAreKept(t *testing.T) {
	t.Parallel()
	names := calledFunctions(t)
	pool := sqltest.New(t)
	rows, err := pool.Query(context.Background(), `
SELECT p.oid::regprocedure::text || ' -> ' || pg_get_function_result(p.oid)
FROM pg_proc p WHERE p.pronamespace = 'ordo'::regnamespace AND p.proname = ANY($1)
ORDER BY 1`, names)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(signaturesFile)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, l := range strings.Split(string(raw), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			want = append(want, l)
		}
	}
	if !slices.Equal(got, want) {
		var gone, added []string
		for _, s := range want {
			if !slices.Contains(got, s) {
				gone = append(gone, s)
			}
		}
		for _, s := range got {
			if !slices.Contains(want, s) {
				added = append(added, s)
			}
		}
		t.Fatalf("the signatures of SQL functions that ordo's Go code calls changed: a process of the previous version calling one fails until restarted.\n"+
			"gone:\n  %s\nnew:\n  %s\n"+
			"Keep the old signature, or make sure old calls still resolve and read the same result (a new last argument with a DEFAULT does; "+
			"a new result column does not), or, if the break is meant, raise sql.OldestServed to the new migration's number (the build before then stops at the migration instead of failing on the call) and say so in the upgrade notes. Then make sql/%s read:\n%s", strings.Join(gone, "\n  "), strings.Join(added, "\n  "), signaturesFile, strings.Join(got, "\n"))
	}
}

// calledFunctions lists the ordo.* functions named in the module's Go code
// outside tests, and the public ones.
func calledFunctions(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, n := range publicFunctions {
		seen[n] = true
	}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".." || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range goCallsFunction.FindAllStringSubmatch(string(src), -1) {
			seen[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
