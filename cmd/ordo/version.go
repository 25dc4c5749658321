package main

import (
	"context"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
)

// runVersion is `ordo version`: the build as Go recorded it.
func runVersion(_ context.Context, env *cli.Env, args []string) error {
	if err := cli.ParseFlags(cli.NewFlagSet(env, "ordo version"), args); err != nil {
		return err
	}
	return cli.PrintJSON(env.Stdout, cli.ReadBuild())
}
