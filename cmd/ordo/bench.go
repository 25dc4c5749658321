package main

import (
	"context"
	"errors"
)

func runBench(ctx context.Context, env *environment, args []string) error {
	return errors.New("not built yet")
}
