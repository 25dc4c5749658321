package main

import (
	"context"
	"errors"
)

func runTestEnv(ctx context.Context, env *environment, args []string) error {
	return errors.New("not built yet")
}
