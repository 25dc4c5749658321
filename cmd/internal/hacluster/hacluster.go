// Package hacluster runs a PostgreSQL cluster under a real HA manager on
// loopback, for the crash run's failover faults (make chaos-ha): one etcd,
// and one Patroni per node, each Patroni starting and supervising its own
// PostgreSQL — a primary and its standbys, with synchronous replication.
// It is what the production guide runs (Patroni with etcd), made small:
// every process on 127.0.0.1, supervised by package proc so that it dies
// with the harness.
//
// PostgreSQL refuses to run as root, so when the caller is root Patroni (and
// so PostgreSQL) runs as the `postgres` account in directories it owns, as
// package pgcluster does. The Debian packages patroni and etcd-server are
// installed with apt-get when missing (Install).
package hacluster

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/cmd/internal/pgcluster"
	"github.com/ordo-dev/ordo/cmd/internal/proc"
)

// Defaults of Config, named so that the README and the run's log can print
// them.
const (
	// NodesDefault is a primary and two standbys: one standby can be down
	// (restarted, rewinding) while the other is the synchronous one.
	NodesDefault = 3
	// TTLDefault is the leader key's time to live in etcd: how long a
	// primary whose Patroni stopped talking (a dead node) keeps its role.
	// Generous, for a loaded machine; a crash of PostgreSQL under a live
	// Patroni fails over at once (PrimaryStartTimeout 0).
	TTLDefault = 20 * time.Second
	// LoopWaitDefault is Patroni's loop: how soon it notices a change.
	LoopWaitDefault = 2 * time.Second
	// RetryTimeoutDefault bounds Patroni's retries of etcd and PostgreSQL
	// operations before it demotes a primary it cannot confirm.
	RetryTimeoutDefault = 8 * time.Second
	// ReadyTimeoutDefault bounds Start and WaitHealthy.
	ReadyTimeoutDefault = 3 * time.Minute
)

// Config is one HA cluster.
type Config struct {
	// Dir holds etcd's data, each node's data directory, configuration
	// and logs (Dir/etcd, Dir/node1, …). Created if missing. Required.
	Dir string
	// Nodes is the number of PostgreSQL nodes. Default NodesDefault.
	Nodes int
	// Settings are PostgreSQL settings for every node, on top of the
	// cluster's own (synchronous_commit on, wal_log_hints on for
	// pg_rewind, max_connections 300). Default none.
	Settings map[string]string
	// Port returns a free TCP port on 127.0.0.1 for each server (etcd's
	// two, and each node's PostgreSQL and REST API). Default: one the
	// kernel picks.
	Port func() (int, error)
	// TTL, LoopWait and RetryTimeout are Patroni's (see the defaults).
	TTL, LoopWait, RetryTimeout time.Duration
	// ReadyTimeout bounds Start and WaitHealthy. Default ReadyTimeoutDefault.
	ReadyTimeout time.Duration
	// Logf, if set, is told what the cluster does.
	Logf func(format string, args ...any)
}

func (c Config) withDefaults() Config {
	c.Nodes = cmp.Or(c.Nodes, NodesDefault)
	c.TTL = cmp.Or(c.TTL, TTLDefault)
	c.LoopWait = cmp.Or(c.LoopWait, LoopWaitDefault)
	c.RetryTimeout = cmp.Or(c.RetryTimeout, RetryTimeoutDefault)
	c.ReadyTimeout = cmp.Or(c.ReadyTimeout, ReadyTimeoutDefault)
	if c.Port == nil {
		c.Port = freePort
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Dir == "":
		return errors.New("hacluster: Dir: required")
	case c.Nodes < 2:
		return errors.New("hacluster: Nodes: at least 2 (a primary and a synchronous standby)")
	case c.TTL < c.LoopWait+2*c.RetryTimeout:
		return fmt.Errorf("TTL: at least LoopWait + 2×RetryTimeout (%s), as Patroni wants", c.LoopWait+2*c.RetryTimeout)
	}
	return nil
}

// Scope is the cluster's name in etcd and in patronictl.
const Scope = "ordo"

// Cluster is a running HA cluster started by Start.
type Cluster struct {
	cfg     Config
	Dir     string
	etcd    *proc.Proc
	etcdURL string
	Nodes   []*Node
	http    *http.Client
}

// Node is one PostgreSQL server and the Patroni that runs it.
type Node struct {
	Name    string
	Dir     string // Dir/data is PostgreSQL's data directory
	Port    int    // PostgreSQL's, on 127.0.0.1
	APIPort int    // Patroni's REST API, on 127.0.0.1
	patroni *proc.Proc
}

// DataDir is the node's PostgreSQL data directory.
func (n *Node) DataDir() string { return filepath.Join(n.Dir, "data") }

// LogPath is the node's PostgreSQL log (Patroni's is PatroniLog).
func (n *Node) LogPath() string { return filepath.Join(n.Dir, "log", "postgres.log") }

// PatroniLog is the node's Patroni log.
func (n *Node) PatroniLog() string { return n.patroni.LogPath() }

// APIURL is the node's Patroni REST API.
func (n *Node) APIURL() string { return "http://127.0.0.1:" + strconv.Itoa(n.APIPort) }

// Start starts etcd and the nodes' Patronis: the first node bootstraps the
// cluster (initdb) and becomes the primary, the others clone it
// (pg_basebackup) and stream from it. It returns once the cluster is
// healthy (WaitHealthy).
func Start(ctx context.Context, cfg Config) (c *Cluster, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("ha cluster config: %w", err)
	}
	for _, bin := range []string{"patroni", "etcd"} {
		if _, err := lookPath(bin); err != nil {
			return nil, fmt.Errorf("%s is not installed: %w (hacluster.Install installs it; make chaos-ha does)", bin, err)
		}
	}
	binDir, err := pgcluster.FindBinaries()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	acct, err := postgresAccount()
	if err != nil {
		return nil, err
	}
	if err := prepare(dir, acct); err != nil {
		return nil, err
	}
	c = &Cluster{cfg: cfg, Dir: dir, http: &http.Client{Timeout: 10 * time.Second}}
	defer func() {
		if err != nil {
			c.Stop(context.WithoutCancel(ctx))
		}
	}()
	if err := c.startEtcd(); err != nil {
		return nil, err
	}
	for i := range cfg.Nodes {
		n := &Node{Name: "node" + strconv.Itoa(i+1), Dir: filepath.Join(dir, "node"+strconv.Itoa(i+1))}
		if n.Port, err = cfg.Port(); err != nil {
			return nil, err
		}
		if n.APIPort, err = cfg.Port(); err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	for _, n := range c.Nodes {
		if err := c.writeNode(n, binDir, acct); err != nil {
			return nil, err
		}
	}
	// The first node alone, so that it bootstraps; then the standbys.
	if err := c.Nodes[0].patroni.Start(); err != nil {
		return nil, err
	}
	if err := c.waitLeader(ctx); err != nil {
		return nil, err
	}
	for _, n := range c.Nodes[1:] {
		if err := n.patroni.Start(); err != nil {
			return nil, err
		}
	}
	if _, err := c.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	cfg.Logf("ha cluster: etcd and %d Patroni nodes up, synchronous replication on", len(c.Nodes))
	return c, nil
}

// URL is the multi-host connection URL of database, as ordo's operators
// write DATABASE_URL for an HA cluster: every node, and
// target_session_attrs=read-write so that each new connection finds the
// primary wherever it is now.
func (c *Cluster) URL(database string) string {
	hosts := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		hosts[i] = "127.0.0.1:" + strconv.Itoa(n.Port)
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=5",
		strings.Join(hosts, ","), database)
}

// NodeURL is one node's connection URL (whatever its role).
func (n *Node) NodeURL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=5", n.Port, database)
}

// Stop stops every Patroni (each stops its PostgreSQL) and etcd; any
// PostgreSQL left running is shut down immediately.
func (c *Cluster) Stop(ctx context.Context) {
	done := make(chan struct{})
	for _, n := range c.Nodes {
		go func() {
			defer func() { done <- struct{}{} }()
			if n.patroni != nil {
				_ = n.patroni.Stop(60 * time.Second)
			}
			pgcluster.StopLeftover(n.Dir)
		}()
	}
	for range c.Nodes {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	if c.etcd != nil {
		_ = c.etcd.Stop(10 * time.Second)
	}
}

// Member is one node as Patroni's GET /cluster describes it.
type Member struct {
	Name     string `json:"name"`
	Role     string `json:"role"`  // leader, sync_standby, replica
	State    string `json:"state"` // running, starting, stopped, …
	Timeline int    `json:"timeline"`
	Lag      any    `json:"lag"`
}

// Members asks the nodes' REST APIs, in turn, for the cluster's view.
func (c *Cluster) Members(ctx context.Context) ([]Member, error) {
	var lastErr error
	for _, n := range c.Nodes {
		var out struct {
			Members []Member `json:"members"`
		}
		if err := c.call(ctx, http.MethodGet, n.APIURL()+"/cluster", nil, &out); err != nil {
			lastErr = err
			continue
		}
		return out.Members, nil
	}
	return nil, fmt.Errorf("no Patroni answered GET /cluster: %w", lastErr)
}

// Node returns the node named name.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Health is the cluster as WaitHealthy found it.
type Health struct {
	Leader   string
	Sync     string // the synchronous standby
	Timeline int
}

// Healthy reports the cluster's state if it is healthy: a leader that
// accepts writes, every other node streaming from it, one of them the
// synchronous standby (pg_stat_replication on the leader says so, not only
// Patroni).
func (c *Cluster) Healthy(ctx context.Context) (Health, error) {
	members, err := c.Members(ctx)
	if err != nil {
		return Health{}, err
	}
	var h Health
	for _, m := range members {
		switch {
		case m.Role == "leader" && m.State == "running":
			h.Leader, h.Timeline = m.Name, m.Timeline
		case m.Role == "sync_standby":
			h.Sync = m.Name
		}
	}
	leader := c.Node(h.Leader)
	if leader == nil {
		return h, errors.New("no running leader")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, leader.NodeURL("postgres"))
	if err != nil {
		return h, fmt.Errorf("connect to the leader %s: %w", h.Leader, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var readOnly string
	var streaming, sync int
	if err := conn.QueryRow(ctx, healthQuery).Scan(&readOnly, &streaming, &sync); err != nil {
		return h, fmt.Errorf("ask the leader %s: %w", h.Leader, err)
	}
	switch {
	case readOnly != "off":
		return h, fmt.Errorf("the leader %s is read-only", h.Leader)
	case streaming < len(c.Nodes)-1:
		return h, fmt.Errorf("%d of %d standbys streaming from %s", streaming, len(c.Nodes)-1, h.Leader)
	case sync < 1 || h.Sync == "":
		return h, fmt.Errorf("no synchronous standby on %s", h.Leader)
	}
	return h, nil
}

const healthQuery = `
SELECT current_setting('transaction_read_only'),
       count(*) FILTER (WHERE state = 'streaming')::int,
       count(*) FILTER (WHERE state = 'streaming' AND sync_state = 'sync')::int
FROM pg_stat_replication`

// WaitHealthy waits, up to Config.ReadyTimeout, until Healthy says so.
func (c *Cluster) WaitHealthy(ctx context.Context) (Health, error) {
	deadline := time.Now().Add(c.cfg.ReadyTimeout)
	for {
		h, err := c.Healthy(ctx)
		if err == nil {
			return h, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return h, fmt.Errorf("ha cluster not healthy within %s: %w", c.cfg.ReadyTimeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (c *Cluster) waitLeader(ctx context.Context) error {
	deadline := time.Now().Add(c.cfg.ReadyTimeout)
	for {
		members, err := c.Members(ctx)
		if err == nil {
			for _, m := range members {
				if m.Role == "leader" && m.State == "running" {
					return nil
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("no Patroni leader within %s (last: %v)%s", c.cfg.ReadyTimeout, err, c.Nodes[0].patroni.LogTail())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// KillPostmaster sends SIGKILL to node's postmaster (read from its
// postmaster.pid) and returns its pid: PostgreSQL crashes under a live
// Patroni.
func (c *Cluster) KillPostmaster(n *Node) (int, error) {
	b, err := os.ReadFile(filepath.Join(n.DataDir(), "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("read %s's postmaster.pid: %w", n.Name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s's postmaster.pid: no pid", n.Name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("kill -9 %s's postmaster %d: %w", n.Name, pid, err)
	}
	return pid, nil
}

// Switchover asks Patroni (POST /switchover on the leader, as `patronictl
// switchover --force` does) to hand the primary role from leader to
// candidate, which must be the synchronous standby in synchronous mode.
func (c *Cluster) Switchover(ctx context.Context, leader, candidate string) error {
	n := c.Node(leader)
	if n == nil {
		return fmt.Errorf("switchover: no node %q", leader)
	}
	body, _ := json.Marshal(map[string]string{"leader": leader, "candidate": candidate})
	return c.call(ctx, http.MethodPost, n.APIURL()+"/switchover", body, nil)
}

// Restart asks node's Patroni (POST /restart, as `patronictl restart`)
// to restart its PostgreSQL.
func (c *Cluster) Restart(ctx context.Context, n *Node) error {
	return c.call(ctx, http.MethodPost, n.APIURL()+"/restart", []byte(`{}`), nil)
}

// call is one request to a Patroni REST API; a non-2xx answer is an error
// holding its body.
func (c *Cluster) call(ctx context.Context, method, url string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// account is the OS account the nodes run as: postgres when the caller is
// root (nil otherwise: the caller's).
type account struct {
	uid, gid uint32
}

func postgresAccount() (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root and there is no postgres account to run Patroni as: %w", err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, err
	}
	return &account{uid: uint32(uid), gid: uint32(gid)}, nil
}

func (a *account) credential() *syscall.Credential {
	if a == nil {
		return nil
	}
	return &syscall.Credential{Uid: a.uid, Gid: a.gid}
}

// chown hands path to the account (nothing when there is none).
func (a *account) chown(path string) error {
	if a == nil {
		return nil
	}
	return os.Chown(path, int(a.uid), int(a.gid))
}

// prepare creates dir and makes it, and every directory above it, passable
// by the account that runs the nodes.
func prepare(dir string, a *account) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if a == nil {
		return nil
	}
	for p := dir; p != filepath.Dir(p); p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			if !strings.HasPrefix(p, os.TempDir()+string(filepath.Separator)) && p != dir {
				return fmt.Errorf("%s: the postgres account cannot pass %s (mode %s): choose a directory under %s", dir, p, st.Mode().Perm(), os.TempDir())
			}
			if err := os.Chmod(p, st.Mode().Perm()|0o011); err != nil {
				return err
			}
		}
	}
	return nil
}
