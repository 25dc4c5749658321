package main

import (
	"context"
	"runtime/debug"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
)

// runVersion is `ordo version`: the build as Go recorded it.
func runVersion(_ context.Context, env *cli.Env, args []string) error {
	if err := cli.ParseFlags(cli.NewFlagSet(env, "ordo version"), args); err != nil {
		return err
	}
	out := map[string]string{"version": "(devel)"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		out["version"], out["go"] = bi.Main.Version, bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				out["commit"] = s.Value
			case "vcs.time":
				out["commit_time"] = s.Value
			case "vcs.modified":
				out["modified"] = s.Value
			}
		}
	}
	return cli.PrintJSON(env.Stdout, out)
}
