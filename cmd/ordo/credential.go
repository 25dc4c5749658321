package main

import (
	"context"
	"errors"
)

func runCredential(ctx context.Context, env *environment, args []string) error {
	return errors.New("not built yet")
}
