// Package pgcluster starts and stops a private PostgreSQL cluster from the
// PostgreSQL server binaries installed on the machine. `ordo dev` keeps one
// under ./.ordo/, `make test` runs the tests against a throwaway one, and the
// chaos suite restarts one to prove that nothing accepted is lost.
//
// PostgreSQL refuses to run as root, so when the calling process is root the
// cluster belongs to the `postgres` account and every server binary runs
// through `runuser -u postgres --`.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNoBinaries is wrapped by FindBinaries (and so by Start) when no
// PostgreSQL server binaries are installed.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries found")

const (
	// superuser is the cluster's bootstrap superuser, and the OS account the
	// cluster runs as when the caller is root.
	superuser = "postgres"
	// confFile is rewritten at every start with Config's settings; the
	// cluster's postgresql.conf includes it.
	confFile = "ordo.conf"
	// includeLine is appended to postgresql.conf so confFile's settings apply.
	includeLine = "include_if_exists = '" + confFile + "'"
	// pgCtlTimeout bounds how long pg_ctl waits for a start or a stop.
	pgCtlTimeout = 120 * time.Second
	// maxSocketPath is the longest unix socket path Linux accepts (sun_path
	// minus its terminating NUL).
	maxSocketPath = 107
)

// Config says where a cluster lives and how it runs.
type Config struct {
	// Dir is the cluster directory: the data directory is Dir/data, the unix
	// socket lives in Dir, the server log is Dir/postgres.log and the port
	// is recorded in Dir/port. Created if missing. Required.
	//
	// When the caller is root, Dir, Dir/data and those files are handed to the
	// postgres account; Dir must then be new, empty or a directory a previous
	// Start made, and every directory above it must be searchable by
	// postgres (Start adds o+x to the ones it creates and to ones inside the
	// system temporary directory; for any other it returns an error).
	Dir string

	// Port is the TCP port on 127.0.0.1. Default 0: the port recorded in
	// Dir/port by a previous Start, else a free one.
	Port int

	// Fast trades durability for speed, for throwaway clusters: fsync=off,
	// synchronous_commit=off, full_page_writes=off (and initdb skips its
	// fsync). Default false: the server's durable defaults.
	Fast bool

	// Settings are extra server settings (as `-c name=value`), applied on top
	// of the defaults: listen_addresses=127.0.0.1, max_connections=300,
	// shared_buffers=256MB. Default none. They take effect when Start starts
	// the server, not when it reuses a running one.
	Settings map[string]string

	// Logger receives what the cluster does (initdb, start, stop). Default:
	// discard.
	Logger *slog.Logger
}

var settingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

func (cfg Config) withDefaults() Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

func (cfg Config) validate() error {
	if cfg.Dir == "" {
		return errors.New("pgcluster: Dir: required")
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return fmt.Errorf("pgcluster: Port: %d is not a TCP port", cfg.Port)
	}
	for name, value := range cfg.Settings {
		if !settingName.MatchString(name) {
			return fmt.Errorf("pgcluster: Settings: %q is not a setting name", name)
		}
		if strings.ContainsAny(value, "\n\r\x00") {
			return fmt.Errorf("pgcluster: Settings: %s: value holds a line break", name)
		}
	}
	return nil
}

// Cluster is a local PostgreSQL cluster started by Start.
type Cluster struct {
	// Dir is the absolute cluster directory (data in Dir/data).
	Dir string
	// Port is the TCP port the server listens on, on 127.0.0.1.
	Port int
	// BinDir holds pg_ctl, initdb and postgres.
	BinDir string

	logger *slog.Logger
}

// FindBinaries returns the directory holding the PostgreSQL server binaries:
// the one of pg_ctl on PATH, else the newest /usr/lib/postgresql/*/bin (or
// another usual install location).
func FindBinaries() (binDir string, err error) {
	return findBinaries(exec.LookPath, []string{
		"/usr/lib/postgresql/*/bin",          // Debian, Ubuntu
		"/usr/pgsql-*/bin",                   // PGDG RPMs
		"/usr/local/pgsql/bin",               // built from source
		"/opt/homebrew/opt/postgresql@*/bin", // Homebrew, Apple silicon
		"/usr/local/opt/postgresql@*/bin",    // Homebrew, Intel
	})
}

// findBinaries is FindBinaries with the PATH lookup and the glob patterns of
// install locations given; the highest version matched by a pattern's `*`
// wins.
func findBinaries(lookPath func(string) (string, error), patterns []string) (string, error) {
	if lookPath != nil {
		if p, err := lookPath("pg_ctl"); err == nil {
			// Resolve symlinks such as /usr/local/bin/pg_ctl so that initdb and
			// postgres are looked up next to the real pg_ctl.
			if real, err := filepath.EvalSymlinks(p); err == nil && hasServerBinaries(filepath.Dir(real)) {
				return filepath.Dir(real), nil
			}
			if hasServerBinaries(filepath.Dir(p)) {
				return filepath.Dir(p), nil
			}
		}
	}
	type candidate struct {
		dir     string
		version []int
	}
	var found []candidate
	for _, pattern := range patterns {
		matches, err := filepath.Glob(pattern)
		if err != nil {
			return "", fmt.Errorf("search %s: %w", pattern, err)
		}
		prefix, suffix, _ := strings.Cut(pattern, "*")
		for _, m := range matches {
			if hasServerBinaries(m) {
				v := strings.TrimSuffix(strings.TrimPrefix(m, prefix), suffix)
				found = append(found, candidate{dir: m, version: parseVersion(v)})
			}
		}
	}
	if len(found) == 0 {
		return "", fmt.Errorf("%w (looked for pg_ctl on PATH and in %s): install PostgreSQL (`apt-get install postgresql`) or use `docker compose up` with the repo's compose.yaml",
			ErrNoBinaries, strings.Join(patterns, ", "))
	}
	sort.SliceStable(found, func(i, j int) bool { return lessVersion(found[j].version, found[i].version) })
	return found[0].dir, nil
}

func hasServerBinaries(dir string) bool {
	for _, name := range []string{"pg_ctl", "initdb", "postgres"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// parseVersion reads "15" or "9.6" as [15] or [9 6]; anything else is [].
func parseVersion(s string) []int {
	var v []int
	for _, part := range strings.Split(s, ".") {
		n, err := strconv.Atoi(part)
		if err != nil {
			return nil
		}
		v = append(v, n)
	}
	return v
}

func lessVersion(a, b []int) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

// Start makes the cluster in cfg.Dir ready: it runs initdb when Dir/data
// holds no cluster, starts the server unless it is already running (a
// running server from an earlier Start is reused as it is), and returns once
// the server accepts connections.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("postgres cluster config: %w", err)
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("postgres cluster directory: %w", err)
	}
	binDir, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	owner, err := lookupOwner()
	if err != nil {
		return nil, err
	}
	if err := prepareDir(dir, owner); err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, BinDir: binDir, logger: cfg.Logger}

	if initialized(c.dataDir()) {
		running, err := c.running(ctx)
		if err != nil {
			return nil, err
		}
		if running {
			port, err := runningPort(c.dataDir())
			if err != nil {
				return nil, err
			}
			c.Port = port
			if err := owner.writeFile(c.portFile(), []byte(strconv.Itoa(port)+"\n")); err != nil {
				return nil, err
			}
			if err := c.waitReady(ctx); err != nil {
				return nil, err
			}
			c.logger.InfoContext(ctx, "postgres cluster already running, reusing it", "dir", dir, "port", port)
			return c, nil
		}
	} else if err := c.initdb(ctx, cfg.Fast, owner); err != nil {
		return nil, err
	}

	port, picked, err := c.choosePort(cfg.Port)
	if err != nil {
		return nil, err
	}
	// A freshly picked port can be taken by someone else before the server
	// binds it; pick again then.
	for attempt := 1; ; attempt++ {
		c.Port = port
		if err := owner.writeFile(c.portFile(), []byte(strconv.Itoa(port)+"\n")); err != nil {
			return nil, err
		}
		if err := owner.writeFile(filepath.Join(c.dataDir(), confFile), c.serverConf(cfg)); err != nil {
			return nil, err
		}
		logSize := fileSize(c.logFile())
		err := c.pgCtl(ctx, "start", "-w", "-t", strconv.Itoa(int(pgCtlTimeout.Seconds())), "-l", c.logFile())
		if err == nil {
			break
		}
		newLog := readFrom(c.logFile(), logSize)
		if picked && attempt < 3 && strings.Contains(newLog, "Address already in use") {
			if port, err = freePort(); err != nil {
				return nil, err
			}
			continue
		}
		return nil, fmt.Errorf("start postgres in %s: %w%s", dir, err, logTail(newLog))
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	c.logger.InfoContext(ctx, "postgres cluster started", "dir", dir, "port", c.Port, "fast", cfg.Fast)
	return c, nil
}

// URL returns the connection URL of database on the cluster, as its superuser.
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", superuser, c.Port, database)
}

// Stop shuts the server down (pg_ctl stop -m fast: open sessions are ended,
// committed work is kept). Stopping a stopped cluster is a no-op.
func (c *Cluster) Stop(ctx context.Context) error {
	err := c.pgCtl(ctx, "stop", "-m", "fast", "-w", "-t", strconv.Itoa(int(pgCtlTimeout.Seconds())))
	if err == nil {
		c.log().InfoContext(ctx, "postgres cluster stopped", "dir", c.Dir)
		return nil
	}
	if running, statusErr := c.running(ctx); statusErr == nil && !running {
		return nil
	}
	return fmt.Errorf("stop postgres in %s: %w", c.Dir, err)
}

// Restart stops and starts the server and waits until it accepts
// connections. With immediate, the server is stopped without a shutdown
// checkpoint (pg_ctl -m immediate), as if it crashed, and the start replays
// the WAL; otherwise it shuts down cleanly (-m fast).
func (c *Cluster) Restart(ctx context.Context, immediate bool) error {
	mode := "fast"
	if immediate {
		mode = "immediate"
	}
	if err := c.pgCtl(ctx, "restart", "-m", mode, "-w", "-t", strconv.Itoa(int(pgCtlTimeout.Seconds())), "-l", c.logFile()); err != nil {
		return fmt.Errorf("restart postgres (-m %s) in %s: %w%s", mode, c.Dir, err, logTail(readLast(c.logFile(), 4096)))
	}
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	c.log().InfoContext(ctx, "postgres cluster restarted", "dir", c.Dir, "mode", mode)
	return nil
}

// CreateDatabase creates database name, owned by the superuser; it is a
// no-op when the database exists.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("create database %s: connect: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("create database %s: look it up: %w", name, err)
	}
	if exists {
		return nil
	}
	// CREATE DATABASE takes no parameters; the name is quoted as an identifier.
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.DuplicateDatabase {
			return nil // created concurrently
		}
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

func (c *Cluster) dataDir() string  { return filepath.Join(c.Dir, "data") }
func (c *Cluster) logFile() string  { return filepath.Join(c.Dir, "postgres.log") }
func (c *Cluster) portFile() string { return filepath.Join(c.Dir, "port") }

func (c *Cluster) log() *slog.Logger {
	if c.logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.logger
}

func initialized(dataDir string) bool {
	_, err := os.Stat(filepath.Join(dataDir, "PG_VERSION"))
	return err == nil
}

// initdb creates the cluster: superuser postgres, UTF8, locale C, and
// password-less (trust) access for local connections only — the socket in
// Dir and 127.0.0.1, the only address the server listens on.
func (c *Cluster) initdb(ctx context.Context, fast bool, owner *owner) error {
	args := []string{"-D", c.dataDir(), "-U", superuser, "-E", "UTF8", "--locale=C", "-A", "trust"}
	if fast {
		args = append(args, "--no-sync")
	}
	c.log().InfoContext(ctx, "creating postgres cluster", "dir", c.Dir)
	if out, err := c.run(ctx, "initdb", args...); err != nil {
		return fmt.Errorf("initdb %s: %w: %s", c.dataDir(), err, strings.TrimSpace(out))
	}
	hba := "# Written by ordo's pgcluster: local connections only, no password.\n" +
		"# TYPE  DATABASE     USER  ADDRESS        METHOD\n" +
		"local   all          all                  trust\n" +
		"local   replication  all                  trust\n" +
		"host    all          all   127.0.0.1/32   trust\n" +
		"host    replication  all   127.0.0.1/32   trust\n"
	if err := owner.writeFile(filepath.Join(c.dataDir(), "pg_hba.conf"), []byte(hba)); err != nil {
		return err
	}
	conf := filepath.Join(c.dataDir(), "postgresql.conf")
	b, err := os.ReadFile(conf)
	if err != nil {
		return fmt.Errorf("read postgresql.conf: %w", err)
	}
	if !bytes.Contains(b, []byte(includeLine)) {
		b = append(b, "\n# Settings written by ordo's pgcluster at every start.\n"+includeLine+"\n"...)
		if err := owner.writeFile(conf, b); err != nil {
			return err
		}
	}
	return nil
}

// serverConf renders the settings Start applies: the defaults, the
// durability switches and cfg.Settings, in that order of precedence.
func (c *Cluster) serverConf(cfg Config) []byte {
	settings := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"port":                    strconv.Itoa(c.Port),
		"unix_socket_directories": c.Dir,
		"max_connections":         "300",
		"shared_buffers":          "256MB",
		"fsync":                   "on",
		"synchronous_commit":      "on",
		"full_page_writes":        "on",
	}
	if len(c.Dir)+len("/.s.PGSQL.65535.lock") > maxSocketPath {
		// Too long for a socket path: TCP only.
		settings["unix_socket_directories"] = ""
	}
	if cfg.Fast {
		settings["fsync"] = "off"
		settings["synchronous_commit"] = "off"
		settings["full_page_writes"] = "off"
	}
	for name, value := range cfg.Settings {
		settings[name] = value
	}
	names := make([]string, 0, len(settings))
	for name := range settings {
		names = append(names, name)
	}
	sort.Strings(names)
	var b bytes.Buffer
	b.WriteString("# Written by ordo's pgcluster at every start: edits are overwritten.\n")
	for _, name := range names {
		fmt.Fprintf(&b, "%s = '%s'\n", name, strings.ReplaceAll(settings[name], "'", "''"))
	}
	return b.Bytes()
}

// choosePort returns the port to start on, and whether it was freshly picked.
func (c *Cluster) choosePort(configured int) (port int, picked bool, err error) {
	if configured != 0 {
		return configured, false, nil
	}
	if b, err := os.ReadFile(c.portFile()); err == nil {
		if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && p > 0 && p <= 65535 {
			return p, false, nil
		}
	}
	p, err := freePort()
	return p, true, err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// runningPort reads the port of the running server from postmaster.pid
// (its fourth line).
func runningPort(dataDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("read port of running postgres: %w", err)
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return 0, fmt.Errorf("read port of running postgres: postmaster.pid has %d lines", len(lines))
	}
	port, err := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err != nil {
		return 0, fmt.Errorf("read port of running postgres: %w", err)
	}
	return port, nil
}

// running reports whether a server runs on the data directory.
func (c *Cluster) running(ctx context.Context) (bool, error) {
	out, err := c.run(ctx, "pg_ctl", "status", "-D", c.dataDir())
	if err == nil {
		return true, nil
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && exitErr.ExitCode() == 3 { // 3: not running
		return false, nil
	}
	return false, fmt.Errorf("pg_ctl status %s: %w: %s", c.dataDir(), err, strings.TrimSpace(out))
}

// waitReady returns once the server answers a query.
func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, pgCtlTimeout)
	defer cancel()
	var lastErr error
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgx.Connect(attempt, c.URL("postgres"))
		if err == nil {
			_, err = conn.Exec(attempt, "SELECT 1")
			conn.Close(context.WithoutCancel(ctx))
		}
		cancelAttempt()
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for postgres on port %d: %w (last error: %v)%s", c.Port, ctx.Err(), lastErr, logTail(readLast(c.logFile(), 4096)))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) pgCtl(ctx context.Context, action string, args ...string) error {
	out, err := c.run(ctx, "pg_ctl", append([]string{action, "-D", c.dataDir()}, args...)...)
	if err != nil {
		return fmt.Errorf("pg_ctl %s: %w: %s", action, err, strings.TrimSpace(out))
	}
	return nil
}

// run runs one of the server binaries, as postgres when the caller is root,
// and returns its combined output.
func (c *Cluster) run(ctx context.Context, name string, args ...string) (string, error) {
	path := filepath.Join(c.BinDir, name)
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.CommandContext(ctx, runuserPath(), append([]string{"-u", superuser, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	// Run from the cluster directory: the caller's working directory may be
	// one the postgres account cannot enter.
	cmd.Dir = c.Dir
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	// The server is started with its output sent to the log file, so nothing
	// should keep the pipe open after pg_ctl exits; do not hang if it does.
	cmd.WaitDelay = 5 * time.Second
	c.log().DebugContext(ctx, "postgres command", "command", name, "args", args)
	err := cmd.Run()
	return out.String(), err
}

func runuserPath() string {
	if p, err := exec.LookPath("runuser"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/runuser", "/sbin/runuser"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "runuser"
}

// owner is the account the cluster's files belong to when the caller is
// root; nil otherwise (files then belong to the caller).
type owner struct {
	uid, gid int
	gids     map[int]bool
}

func lookupOwner() (*owner, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(superuser)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root and there is no %q account to run it as (install PostgreSQL's package, which creates it, or run as another user): %w", superuser, err)
	}
	o := &owner{gids: map[int]bool{}}
	if o.uid, err = strconv.Atoi(u.Uid); err != nil {
		return nil, fmt.Errorf("uid of %s: %w", superuser, err)
	}
	if o.gid, err = strconv.Atoi(u.Gid); err != nil {
		return nil, fmt.Errorf("gid of %s: %w", superuser, err)
	}
	o.gids[o.gid] = true
	if groups, err := u.GroupIds(); err == nil {
		for _, g := range groups {
			if n, err := strconv.Atoi(g); err == nil {
				o.gids[n] = true
			}
		}
	}
	return o, nil
}

// writeFile writes a file of the cluster, owned by the cluster's account.
func (o *owner) writeFile(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if o != nil {
		if err := os.Chown(path, o.uid, o.gid); err != nil {
			return fmt.Errorf("chown %s: %w", path, err)
		}
	}
	return nil
}

// canSearch reports whether the cluster's account may traverse a directory
// with this mode and owner.
func (o *owner) canSearch(st fs.FileInfo, uid, gid int) bool {
	mode := st.Mode().Perm()
	switch {
	case uid == o.uid:
		return mode&0o100 != 0
	case o.gids[gid]:
		return mode&0o010 != 0
	default:
		return mode&0o001 != 0
	}
}

// prepareDir creates dir and, when the caller is root, hands the cluster's
// part of it to the postgres account and makes sure that account can reach
// it.
func prepareDir(dir string, o *owner) error {
	var created []string
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		}
		created = append(created, p)
		if p == filepath.Dir(p) {
			break
		}
	}
	existed := true
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		existed = false
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("create postgres cluster directory: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create postgres cluster directory: %w", err)
	}
	if o == nil {
		return nil
	}
	if existed {
		if err := checkTakeOver(dir, o); err != nil {
			return err
		}
	}
	if err := o.ensureReachable(dir, created, os.TempDir()); err != nil {
		return err
	}
	// Dir itself (the socket and the log go there), the data directory and
	// the files Start writes; nothing else the directory may hold.
	for _, p := range []string{dir, filepath.Join(dir, "port"), filepath.Join(dir, "postgres.log")} {
		if err := os.Lchown(p, o.uid, o.gid); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("hand %s to %s: %w", p, superuser, err)
		}
	}
	err := filepath.WalkDir(filepath.Join(dir, "data"), func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, o.uid, o.gid)
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("hand %s to %s: %w", filepath.Join(dir, "data"), superuser, err)
	}
	return nil
}

// checkTakeOver refuses to give an existing directory to the postgres
// account unless it is empty, already postgres's, or a cluster directory.
func checkTakeOver(dir string, o *owner) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("postgres cluster directory: %w", err)
	}
	if uid, _, ok := fileOwner(st); ok && uid == o.uid {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("postgres cluster directory: %w", err)
	}
	for _, e := range entries {
		switch e.Name() {
		case "data", "port", "postgres.log":
			return nil
		}
	}
	if len(entries) > 0 {
		return fmt.Errorf("postgres cluster directory %s already holds other files; running as root, Start would hand it to the %s account: use a new or empty directory", dir, superuser)
	}
	return nil
}

// ensureReachable checks that the cluster's account can traverse every
// directory above dir. It adds o+x to the directories Start created and to
// those inside the system temporary directory tempRoot (os.MkdirTemp makes
// them 0700); any other blocking directory is an error naming it.
func (o *owner) ensureReachable(dir string, created []string, tempRoot string) error {
	ours := map[string]bool{}
	for _, p := range created {
		ours[p] = true
	}
	tempRoot = filepath.Clean(tempRoot)
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("postgres cluster directory: %w", err)
		}
		uid, gid, _ := fileOwner(st)
		if !o.canSearch(st, uid, gid) {
			inTemp := strings.HasPrefix(p, tempRoot+string(filepath.Separator))
			if !ours[p] && !inTemp {
				return fmt.Errorf("postgres cluster directory %s: the %s account cannot reach it because %s (mode %s) is not searchable by it: choose a directory elsewhere (for example under %s) or run `chmod o+x %s`",
					dir, superuser, p, st.Mode().Perm(), tempRoot, p)
			}
			if err := os.Chmod(p, st.Mode().Perm()|0o001); err != nil {
				return fmt.Errorf("let %s traverse %s: %w", superuser, p, err)
			}
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// fileOwner returns a file's owner and group (ok false where the platform
// does not say).
func fileOwner(st fs.FileInfo) (uid, gid int, ok bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return -1, -1, false
	}
	return int(sys.Uid), int(sys.Gid), true
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// readFrom returns a file's content from offset on ("" when unreadable).
func readFrom(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	return string(b)
}

// readLast returns the last n bytes of a file.
func readLast(path string, n int64) string {
	size := fileSize(path)
	return readFrom(path, max(0, size-n))
}

// logTail formats the end of the server log for an error message.
func logTail(log string) string {
	lines := strings.Split(strings.TrimSpace(log), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return ""
	}
	return "\npostgres.log:\n" + strings.Join(lines, "\n")
}
