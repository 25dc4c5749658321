// Package cli is what ordo's commands share: the environment, read once by
// each main and handed down (no command calls os.Getenv), and the flag and
// output conventions of every subcommand. The product (cmd/ordo), the
// benchmark (cmd/ordo-bench) and the crash run (cmd/ordo-chaos) all use it.
package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/user"
	"strings"

	"golang.org/x/sys/unix"

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
	// OutboundDeny and OutboundAllow are ORDO_OUTBOUND_DENY and
	// ORDO_OUTBOUND_ALLOW, unparsed (Outbound).
	OutboundDeny, OutboundAllow string
	// WhatsAppAPIURL is ORDO_WHATSAPP_API_URL; empty: the Cloud API (serve)
	// or the sandbox (dev).
	WhatsAppAPIURL string
	// DevDir is where a running `ordo dev` left its env file (UseDevEnv);
	// ReadEnv sets it to DevDir; empty: none.
	DevDir         string
	Stdout, Stderr io.Writer
	// Stdin is where a destructive command reads its confirmation (and
	// `credential set --from-file -` its value); Terminal says whether it is
	// a terminal: a command that is not asked on one needs --yes.
	Stdin    io.Reader
	Terminal bool
	// Actor names the operator in the audit log: "cli:user@host", the OS
	// user and the machine the command ran on. Empty: "cli".
	Actor string
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
		OutboundDeny:   os.Getenv("ORDO_OUTBOUND_DENY"),
		OutboundAllow:  os.Getenv("ORDO_OUTBOUND_ALLOW"),
		DevDir:         DevDir,
		Stdout:         os.Stdout,
		Stderr:         os.Stderr,
		Stdin:          os.Stdin,
		Terminal:       isTerminal(os.Stdin),
		Actor:          osActor(),
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

// MakeKeyHint says how to make a master key without Go or a database.
const MakeKeyHint = `make a key with: export ORDO_MASTER_KEYS="k1:$(openssl rand -base64 32)" (or bin/ordo keys generate)`

// Outbound parses ORDO_OUTBOUND_DENY and ORDO_OUTBOUND_ALLOW, the
// operator's part of the outbound address policy for tenants' handler and
// events URLs (tenants.OutboundPolicy): comma-separated addresses or CIDRs
// refused besides the built-in refusals, and allowed whatever refuses them.
func Outbound(env *Env) (tenants.OutboundPolicy, error) {
	deny, err := tenants.ParseOutboundList(env.OutboundDeny)
	if err != nil {
		return tenants.OutboundPolicy{}, fmt.Errorf("ORDO_OUTBOUND_DENY: %w", err)
	}
	allow, err := tenants.ParseOutboundList(env.OutboundAllow)
	if err != nil {
		return tenants.OutboundPolicy{}, fmt.Errorf("ORDO_OUTBOUND_ALLOW: %w", err)
	}
	return tenants.OutboundPolicy{Deny: deny, Allow: allow}, nil
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
		return nil, fmt.Errorf("ORDO_MASTER_KEYS: %w; %s", err, MakeKeyHint)
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

// isTerminal reports whether f is a terminal: a character device that
// answers a terminal's ioctl (/dev/null is a character device too).
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// osActor is "cli:user@host" for the process's OS user and machine.
func osActor() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return "cli:" + name + "@" + host
}

// ErrNotConfirmed is returned by Confirm when the operator did not confirm.
var ErrNotConfirmed = errors.New("not confirmed")

// Confirm guards a destructive command: yes (its --yes flag) goes ahead;
// on a terminal the operator is asked, what naming what will happen, and
// must answer "yes"; anywhere else (a script, a pipe) it refuses, saying to
// add --yes.
func Confirm(env *Env, yes bool, what string) error {
	if yes {
		return nil
	}
	if !env.Terminal || env.Stdin == nil {
		return fmt.Errorf("%w: this %s; run it again with --yes to mean it (no terminal to ask on)", ErrNotConfirmed, what)
	}
	fmt.Fprintf(env.Stderr, "This %s.\nType yes to go on: ", what)
	line, _ := bufio.NewReader(env.Stdin).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		return fmt.Errorf("%w: nothing was done", ErrNotConfirmed)
	}
	return nil
}
