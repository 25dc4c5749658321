package sql

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// functions holds one file per SQL function, named after it, with its one
// current definition (CREATE OR REPLACE FUNCTION ordo.<name>) and doc comment;
// a trigger function's file also creates its triggers, after the function.
//
//go:embed functions/*.sql
var functions embed.FS

// FunctionChecksumsTable records, per function, the SHA-256 of the file that
// defined it. sql.Up re-applies a file only when its checksum changed, so an
// up-to-date database sees no DDL (no catalog write, no plan invalidation in
// running sessions), and CheckMigrated compares it with the binary's files.
const FunctionChecksumsTable = "ordo.function_checksums"

// Function is one file of sql/functions.
type Function struct {
	// Name is the function's name in schema ordo (the file's name).
	Name string
	// SQL is the file: doc comment and CREATE OR REPLACE FUNCTION.
	SQL string
	// Body is the text between the $$ quotes, what pg_proc.prosrc holds.
	Body string
	// Checksum is the hex SHA-256 of SQL.
	Checksum string
}

// Functions returns the SQL functions this binary carries, by name. A file
// that does not define exactly its own function is an error.
func Functions() ([]Function, error) {
	entries, err := fs.ReadDir(functions, "functions")
	if err != nil {
		return nil, fmt.Errorf("read embedded functions: %w", err)
	}
	out := make([]Function, 0, len(entries))
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".sql")
		if !ok {
			continue
		}
		b, err := fs.ReadFile(functions, path.Join("functions", e.Name()))
		if err != nil {
			return nil, err
		}
		text := string(b)
		if n := strings.Count(text, "CREATE OR REPLACE FUNCTION "); n != 1 ||
			!strings.Contains(text, "CREATE OR REPLACE FUNCTION ordo."+name+"(") {
			return nil, fmt.Errorf("functions/%s: want exactly one CREATE OR REPLACE FUNCTION ordo.%s(", e.Name(), name)
		}
		first, last := strings.Index(text, "$$"), strings.LastIndex(text, "$$")
		if first < 0 || last <= first {
			return nil, fmt.Errorf("functions/%s: body not quoted with $$", e.Name())
		}
		sum := sha256.Sum256(b)
		out = append(out, Function{Name: name, SQL: text, Body: text[first+2 : last], Checksum: hex.EncodeToString(sum[:])})
	}
	return out, nil
}

const (
	createChecksumsTable = `CREATE TABLE IF NOT EXISTS ` + FunctionChecksumsTable + ` (
    name       text PRIMARY KEY,
    sha256     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`
	selectChecksums = `SELECT name, sha256 FROM ` + FunctionChecksumsTable
	upsertChecksum  = `INSERT INTO ` + FunctionChecksumsTable + ` (name, sha256) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET sha256 = excluded.sha256, applied_at = now()`
	deleteChecksum = `DELETE FROM ` + FunctionChecksumsTable + ` WHERE name = $1`
	// overloads lists every function of one name in schema ordo, as
	// DROP FUNCTION takes it, and whether it is a trigger function.
	overloads = `SELECT p.oid::regprocedure::text, p.prorettype = 'trigger'::regtype FROM pg_proc p
WHERE p.pronamespace = 'ordo'::regnamespace AND p.proname = $1`
)

// applyFunctions brings schema ordo's functions to the files, in one
// transaction: a file whose checksum changed (or is new) replaces every
// function of its name — dropped first, so a changed signature leaves no
// stale overload behind — and a function whose file is gone is dropped.
// Bodies are plpgsql, checked when first called, so order does not matter.
func applyFunctions(ctx context.Context, conn *pgx.Conn) error {
	files, err := Functions()
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, createChecksumsTable); err != nil {
			return fmt.Errorf("create %s: %w", FunctionChecksumsTable, err)
		}
		applied, err := appliedChecksums(ctx, tx)
		if err != nil {
			return err
		}
		for _, f := range files {
			if applied[f.Name] == f.Checksum {
				continue
			}
			if err := dropFunction(ctx, tx, f.Name); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, f.SQL); err != nil {
				return fmt.Errorf("create function ordo.%s: %w", f.Name, err)
			}
			if _, err := tx.Exec(ctx, upsertChecksum, f.Name, f.Checksum); err != nil {
				return fmt.Errorf("record checksum of ordo.%s: %w", f.Name, err)
			}
		}
		for name := range applied {
			if slices.ContainsFunc(files, func(f Function) bool { return f.Name == name }) {
				continue
			}
			if err := dropFunction(ctx, tx, name); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, deleteChecksum, name); err != nil {
				return fmt.Errorf("forget checksum of ordo.%s: %w", name, err)
			}
		}
		return nil
	})
}

// dropFunctions removes every function sql.Up applied and its bookkeeping
// (the first step of sql.Down). River's own functions are River's to drop.
func dropFunctions(ctx context.Context, conn *pgx.Conn) error {
	files, err := Functions()
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var ordo bool
		if err := tx.QueryRow(ctx, `SELECT to_regnamespace('ordo') IS NOT NULL`).Scan(&ordo); err != nil || !ordo {
			return err
		}
		names := map[string]bool{}
		for _, f := range files {
			names[f.Name] = true
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, FunctionChecksumsTable).Scan(&exists); err != nil {
			return err
		}
		if exists {
			applied, err := appliedChecksums(ctx, tx)
			if err != nil {
				return err
			}
			for name := range applied {
				names[name] = true
			}
		}
		for name := range names {
			if err := dropFunction(ctx, tx, name); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+FunctionChecksumsTable)
		return err
	})
}

// querier is what reading needs: a pool, a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func appliedChecksums(ctx context.Context, q querier) (map[string]string, error) {
	rows, err := q.Query(ctx, selectChecksums)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", FunctionChecksumsTable, err)
	}
	applied := map[string]string{}
	var name, sum string
	_, err = pgx.ForEachRow(rows, []any{&name, &sum}, func() error { applied[name] = sum; return nil })
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", FunctionChecksumsTable, err)
	}
	return applied, nil
}

func dropFunction(ctx context.Context, tx pgx.Tx, name string) error {
	rows, err := tx.Query(ctx, overloads, name)
	if err != nil {
		return fmt.Errorf("look up ordo.%s: %w", name, err)
	}
	type overload struct {
		Sig     string
		Trigger bool
	}
	fns, err := pgx.CollectRows(rows, pgx.RowToStructByPos[overload])
	if err != nil {
		return fmt.Errorf("look up ordo.%s: %w", name, err)
	}
	for _, fn := range fns {
		// Sig is regprocedure's own output (quoted as needed), not input.
		drop := "DROP FUNCTION " + fn.Sig
		if fn.Trigger {
			// Its triggers go with it: its file defines them beside it and
			// creates them again (event_on_step.sql).
			drop += " CASCADE"
		}
		if _, err := tx.Exec(ctx, drop); err != nil {
			return fmt.Errorf("drop %s: %w", fn.Sig, err)
		}
	}
	return nil
}

// checkFunctions reports whether the database's functions are the files'.
func checkFunctions(ctx context.Context, q querier) error {
	files, err := Functions()
	if err != nil {
		return err
	}
	applied, err := appliedChecksums(ctx, q)
	if err != nil {
		return err
	}
	for _, f := range files {
		if applied[f.Name] != f.Checksum {
			return fmt.Errorf("function ordo.%s is not this binary's (run `ordo migrate up`)", f.Name)
		}
		delete(applied, f.Name)
	}
	for name := range applied {
		return fmt.Errorf("function ordo.%s has no file in this binary (run `ordo migrate up`)", name)
	}
	return nil
}
