package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
)

// composeFile is compose.yaml as far as these checks read it.
type composeFile struct {
	Services map[string]struct {
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
		Restart     string            `yaml:"restart"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
		Build struct {
			DockerfileInline string `yaml:"dockerfile_inline"`
		} `yaml:"build"`
	} `yaml:"services"`
}

// Docker is not on the machines the tests run on, so compose.yaml's
// promises are checked on the file: Postgres's healthcheck goes over TCP,
// the migration waits for Postgres, a missing master key stops compose once
// with how to make one, the server does not restart for ever, /admin without
// a password says how to turn it on (ORDO_ADMIN_PASSWORD is passed), every
// port is published on 127.0.0.1 unless asked, and the image builds with
// go.mod's Go.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	pg, migrate, ordo := c.Services["postgres"], c.Services["migrate"], c.Services["ordo"]
	if hc := strings.Join(pg.Healthcheck.Test, " "); !strings.Contains(hc, "pg_isready") || !strings.Contains(hc, "-h 127.0.0.1") {
		t.Errorf("postgres healthcheck %q: want pg_isready over TCP (-h 127.0.0.1)", hc)
	}
	if cmd := strings.Join(migrate.Command, " "); !regexp.MustCompile(`^migrate up --wait [0-9]+[ms]$`).MatchString(cmd) {
		t.Errorf("migrate command %q: want migrate up --wait D", cmd)
	}
	// The flags the file uses exist.
	var out bytes.Buffer
	if code := run(context.Background(), &cli.Env{Stdout: &out, Stderr: &out, Logger: slog.New(slog.DiscardHandler)}, []string{"migrate", "up", "--help"}); code != 0 || !strings.Contains(out.String(), "-wait duration") {
		t.Errorf("ordo migrate up --help: exit %d, %s; want a --wait flag", code, out.String())
	}
	keys := ordo.Environment["ORDO_MASTER_KEYS"]
	if !strings.HasPrefix(keys, "${ORDO_MASTER_KEYS:?") || !strings.Contains(keys, "openssl rand -base64 32") || strings.Contains(keys, "REPLACE") {
		t.Errorf("ordo's ORDO_MASTER_KEYS %q: want compose to refuse a missing key, saying how to make one", keys)
	}
	if _, ok := ordo.Environment["ORDO_ADMIN_PASSWORD"]; !ok {
		t.Errorf("ordo's environment passes no ORDO_ADMIN_PASSWORD")
	}
	if !regexp.MustCompile(`^on-failure:[0-9]+$`).MatchString(ordo.Restart) {
		t.Errorf("ordo restart %q: want on-failure:N, not a loop", ordo.Restart)
	}
	for name, s := range c.Services {
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") && !strings.HasPrefix(p, "${ORDO_PUBLISH:-127.0.0.1:") {
				t.Errorf("%s publishes %q: want 127.0.0.1 by default", name, p)
			}
		}
	}
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go ([0-9.]+)$`).FindSubmatch(mod)
	if goLine == nil || !strings.Contains(ordo.Build.DockerfileInline, "ARG GO_VERSION="+string(goLine[1])+"\n") {
		t.Errorf("the image's GO_VERSION is not go.mod's go %s", goLine[1])
	}
}
