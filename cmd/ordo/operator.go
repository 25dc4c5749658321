package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/engine"
)

const operatorUsage = "ordo operator add --name NAME [--role viewer|operator|admin] | list | remove --name NAME [--yes]"

// runOperator is `ordo operator add|list|remove`: the console's operators.
func runOperator(ctx context.Context, env *cli.Env, args []string) error {
	action, rest, err := subcommand(args, operatorUsage)
	if err != nil {
		return err
	}
	switch action {
	case "add":
		return operatorAdd(ctx, env, rest)
	case "list":
		return operatorList(ctx, env, rest)
	case "remove":
		return operatorRemove(ctx, env, rest)
	default:
		return fmt.Errorf("unknown operator action %q; usage: %s", action, operatorUsage)
	}
}

// readLine reads stdin's first line (at most 4 KiB); "" when there is none.
func readLine(env *cli.Env) (string, error) {
	if env.Stdin == nil {
		return "", nil
	}
	line, err := bufio.NewReader(io.LimitReader(env.Stdin, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read stdin: %w", err)
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// operatorAdd reads the password from stdin's first line when stdin is a
// pipe or a file that holds one; otherwise (a terminal, or nothing piped)
// it generates a one-time password and prints it, the only time it is
// shown.
func operatorAdd(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo operator add")
	name := fs.String("name", "", "the operator's login name, [a-z0-9._-] (required)")
	role := fs.String("role", engine.RoleViewer, "viewer (reads), operator (also replays, skips, pauses, resumes) or admin (also onboards, settings, credentials, keys)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := requireFlag("name", *name); err != nil {
		return err
	}
	password := ""
	if !env.Terminal {
		var err error
		if password, err = readLine(env); err != nil {
			return err
		}
	}
	generated := password == ""
	if generated {
		password = engine.GeneratePassword()
	}
	if err := engine.CheckOperator(*name, *role, password); err != nil {
		return errors.New(engine.ErrorMessage(err))
	}
	pool, err := openPool(ctx, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	o, err := engine.New(pool, env.Logger).AddOperator(ctx, *name, *role, password, actor(env))
	if err != nil {
		return errors.New(engine.ErrorMessage(err))
	}
	out := map[string]string{"operator": o.Name, "role": o.Role}
	if generated {
		out["password"] = password
		fmt.Fprintln(env.Stderr, "the password below is shown once: give it to the operator")
	}
	return cli.PrintJSON(env.Stdout, out)
}

func operatorList(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo operator list")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	pool, err := openPool(ctx, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	list, err := engine.New(pool, env.Logger).Operators(ctx)
	if err != nil {
		return errors.New(engine.ErrorMessage(err))
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROLE\tCREATED")
	for _, o := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", o.Name, o.Role, o.CreatedAt.UTC().Format("2006-01-02 15:04:05Z"))
	}
	return tw.Flush()
}

// operatorRemove asks before it removes, on a terminal; elsewhere it wants
// --yes (cli.Confirm).
func operatorRemove(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo operator remove")
	name := fs.String("name", "", "the operator to remove; their sessions end at once (required)")
	yes := fs.Bool("yes", false, "remove without asking")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := requireFlag("name", *name); err != nil {
		return err
	}
	if err := cli.Confirm(env, *yes, fmt.Sprintf("removes operator %q and ends their sessions", *name)); err != nil {
		return err
	}
	pool, err := openPool(ctx, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := engine.New(pool, env.Logger).RemoveOperator(ctx, *name, actor(env)); err != nil {
		return errors.New(engine.ErrorMessage(err))
	}
	return cli.PrintJSON(env.Stdout, map[string]string{"removed": *name})
}
