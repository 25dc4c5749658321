package main

import (
	"context"
	"errors"
)

func runKeys(ctx context.Context, env *environment, args []string) error {
	return errors.New("not built yet")
}
