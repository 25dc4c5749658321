// Package cli is what ordo's commands share: the environment, read once by
// each main and handed down (no command calls os.Getenv), and the flag and
// output conventions of every subcommand. The product (cmd/ordo), the
// benchmark (cmd/ordo-bench) and the crash run (cmd/ordo-chaos) all use it.
package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"

	"github.com/ordo-dev/ordo/tenants"
)

// Env is what commands may read from the process: the only place os.Getenv
// is called.
type Env struct {
	// DatabaseURL is DATABASE_URL.
	DatabaseURL string
	// Addr is ORDO_ADDR; empty: :8080 (serve), 127.0.0.1:8080 (dev).
	Addr string
	// MasterKeys is ORDO_MASTER_KEYS, unparsed.
	MasterKeys string
	// AdminPassword is ORDO_ADMIN_PASSWORD.
	AdminPassword string
	// TrustedProxies is ORDO_TRUSTED_PROXIES, unparsed (TrustedProxies).
	TrustedProxies string
	// WhatsAppAPIURL is ORDO_WHATSAPP_API_URL; empty: the Cloud API (serve)
	// or the sandbox (dev).
	WhatsAppAPIURL string
	// DevDir is where a running `ordo dev` left its env file (UseDevEnv);
	// ReadEnv sets it to DevDir; empty: none.
	DevDir string
	// Stdin is the process's standard input (a password piped to ordo
	// operator add); nil reads as empty.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Logger logs JSON to stderr at ORDO_LOG_LEVEL (default info).
	Logger *slog.Logger
}

// ReadEnv reads the process's environment.
func ReadEnv() *Env {
	return &Env{
		DatabaseURL:    os.Getenv("DATABASE_URL"),
		Addr:           os.Getenv("ORDO_ADDR"),
		MasterKeys:     os.Getenv("ORDO_MASTER_KEYS"),
		AdminPassword:  os.Getenv("ORDO_ADMIN_PASSWORD"),
		TrustedProxies: os.Getenv("ORDO_TRUSTED_PROXIES"),
		WhatsAppAPIURL: os.Getenv("ORDO_WHATSAPP_API_URL"),
		DevDir:         DevDir,
		Stdin:          os.Stdin,
		Stdout:         os.Stdout,
		Stderr:         os.Stderr,
		Logger:         slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()})),
	}
}

func logLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv("ORDO_LOG_LEVEL"))); err != nil {
		return slog.LevelInfo
	}
	return l
}

// TrustedProxies parses ORDO_TRUSTED_PROXIES: the reverse proxies in front
// of ordo, comma-separated addresses or CIDR prefixes (127.0.0.1,
// 10.0.0.0/8, fd00::/8). Empty: none, X-Forwarded-* headers are ignored.
func TrustedProxies(env *Env) ([]netip.Prefix, error) {
	var ps []netip.Prefix
	for _, f := range strings.Split(env.TrustedProxies, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if a, err := netip.ParseAddr(f); err == nil {
			a = a.Unmap()
			ps = append(ps, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("ORDO_TRUSTED_PROXIES: %q is neither an IP address nor a CIDR prefix (e.g. 10.0.0.0/8)", f)
		}
		ps = append(ps, p.Masked())
	}
	return ps, nil
}

// MasterKeys parses ORDO_MASTER_KEYS.
func MasterKeys(env *Env) ([]tenants.MasterKey, error) {
	if env.MasterKeys == "" {
		return nil, errors.New("ORDO_MASTER_KEYS is not set: set it to the server's own keys (credentials sealed under another key cannot be read); " +
			"against `make dev`, run the command from the directory holding .ordo/, whose env file gives them. " +
			"A new deployment makes its first key with `ordo keys generate`")
	}
	keys, err := tenants.ParseMasterKeys(env.MasterKeys)
	if err != nil {
		return nil, fmt.Errorf("ORDO_MASTER_KEYS: %w", err)
	}
	return keys, nil
}

// NewFlagSet returns a subcommand's flag set, named after the command line
// that reaches it ("ordo serve", "ordo-bench"), writing its usage to stderr.
func NewFlagSet(env *Env, name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	return fs
}

// ParseFlags parses args and refuses stray positional arguments, which are
// usually a forgotten "--".
func ParseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// PrintJSON writes v as one JSON line, the output format of every operator
// command and of the benchmark's results file.
func PrintJSON(w io.Writer, v any) error {
	if err := json.NewEncoder(w).Encode(v); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}
