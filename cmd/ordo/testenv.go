package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/cmd/internal/pgcluster"
)

const (
	// testDatabaseURLVar is sqltest.EnvURL, spelled out so that the binary
	// does not link sqltest and with it package testing.
	testDatabaseURLVar = "ORDO_TEST_DATABASE_URL"
	// testEnvMaxConnections leaves room for every test package's pools at
	// once: go test runs packages in parallel against the one cluster.
	testEnvMaxConnections = "500"
	// testEnvGrace is how long an interrupted command has to exit before its
	// process group is killed.
	testEnvGrace = 15 * time.Second
	// testEnvCleanupTimeout bounds stopping the throwaway cluster.
	testEnvCleanupTimeout = 2 * time.Minute
)

// runTestEnv runs `ordo testenv -- CMD ARGS…`: CMD runs against a throwaway
// PostgreSQL cluster (fast, non-durable settings) named by
// ORDO_TEST_DATABASE_URL, which is stopped and deleted afterwards, also when
// ordo is interrupted. ordo then exits with CMD's exit status.
func runTestEnv(ctx context.Context, env *cli.Env, args []string) error {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return errors.New("usage: ordo testenv -- COMMAND [ARGS...]")
	}
	code, err := testEnv(ctx, env, args)
	if err != nil {
		return err
	}
	if code != 0 {
		// The cluster is gone by now: exiting here skips no cleanup.
		os.Exit(code)
	}
	return nil
}

// testEnv starts the cluster, runs the command and cleans up; it returns the
// command's exit status.
func testEnv(ctx context.Context, env *cli.Env, args []string) (code int, err error) {
	dir, err := os.MkdirTemp("", "ordo-testenv-")
	if err != nil {
		return 0, fmt.Errorf("create cluster directory: %w", err)
	}
	defer func() {
		if rmErr := os.RemoveAll(dir); rmErr != nil {
			fmt.Fprintf(env.Stderr, "ordo testenv: remove %s: %v\n", dir, rmErr)
		}
	}()

	cluster, err := pgcluster.Start(ctx, pgcluster.Config{
		Dir:      dir,
		Fast:     true,
		Settings: map[string]string{"max_connections": testEnvMaxConnections},
		Logger:   env.Logger,
	})
	if err != nil {
		pgcluster.StopLeftover(dir) // initdb or start may have got half way
		return 0, fmt.Errorf("start throwaway postgres: %w", err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), testEnvCleanupTimeout)
		defer cancel()
		if stopErr := cluster.Stop(stopCtx); stopErr != nil {
			fmt.Fprintf(env.Stderr, "ordo testenv: %v\n", stopErr)
			pgcluster.StopLeftover(dir)
		}
	}()

	return runCommand(ctx, env, args, testDatabaseURLVar+"="+cluster.URL("postgres"))
}

// runCommand runs args with extra added to the environment, in a process
// group of its own so that an interrupt reaches everything it started (go
// test's test binaries included), and returns its exit status.
func runCommand(ctx context.Context, env *cli.Env, args []string, extra ...string) (int, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), extra...)
	cmd.Stdin = os.Stdin
	cmd.Stdout = env.Stdout
	cmd.Stderr = env.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("run %s: %w", args[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		pgid := cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGINT)
		select {
		case err = <-done:
		case <-time.After(testEnvGrace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			err = <-done
		}
	}
	if err == nil {
		return 0, nil
	}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		return 0, fmt.Errorf("run %s: %w", args[0], err)
	}
	if status, ok := exitErr.Sys().(syscall.WaitStatus); ok && status.Signaled() {
		return 128 + int(status.Signal()), nil // the shell's convention
	}
	return exitErr.ExitCode(), nil
}
