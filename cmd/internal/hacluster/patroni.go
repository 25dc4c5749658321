package hacluster

// How the processes are configured and started: etcd, then one Patroni per
// node with a configuration file written here (JSON, which is YAML), and
// the Debian packages installed when missing.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/proc"
)

// Packages are the Debian packages the cluster needs beyond PostgreSQL.
var Packages = []string{"patroni", "etcd-server"}

// Install installs Packages with apt-get when patroni or etcd is missing
// (as root; anyone else gets the command to run), telling out what it does.
func Install(ctx context.Context, out io.Writer) error {
	_, errP := lookPath("patroni")
	_, errE := lookPath("etcd")
	if errP == nil && errE == nil {
		return nil
	}
	cmdline := "apt-get install -y --no-install-recommends " + strings.Join(Packages, " ")
	if os.Geteuid() != 0 {
		return fmt.Errorf("patroni or etcd is not installed: run `sudo %s`", cmdline)
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return errors.New("patroni or etcd is not installed and there is no apt-get: install Patroni and etcd")
	}
	fmt.Fprintf(out, "patroni or etcd is missing; installing: %s\n", cmdline)
	install := func() error {
		cmd := exec.CommandContext(ctx, "apt-get", append([]string{"install", "-y", "--no-install-recommends"}, Packages...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = out, out
		return cmd.Run()
	}
	if err := install(); err != nil {
		fmt.Fprintf(out, "apt-get install failed (%v); refreshing the package lists: apt-get update\n", err)
		update := exec.CommandContext(ctx, "apt-get", "update")
		update.Stdout, update.Stderr = out, out
		if err := update.Run(); err != nil {
			return fmt.Errorf("apt-get update: %w (install them yourself: %s)", err, cmdline)
		}
		if err := install(); err != nil {
			return fmt.Errorf("%s: %w", cmdline, err)
		}
	}
	return nil
}

// lookPath finds a binary on PATH or in the Debian packages' places.
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/bin", "/usr/sbin", "/usr/local/bin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// startEtcd starts a one-member etcd on loopback and waits for it.
func (c *Cluster) startEtcd() error {
	bin, err := lookPath("etcd")
	if err != nil {
		return err
	}
	clientPort, err := c.cfg.Port()
	if err != nil {
		return err
	}
	peerPort, err := c.cfg.Port()
	if err != nil {
		return err
	}
	c.etcdURL = "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	c.etcd = proc.New(proc.Config{
		Name: "etcd",
		Argv: []string{bin, "--name", "etcd", "--data-dir", filepath.Join(c.Dir, "etcd"),
			"--listen-client-urls", c.etcdURL, "--advertise-client-urls", c.etcdURL,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "etcd=" + peer, "--initial-cluster-state", "new",
			"--log-level", "warn"},
		LogPath: filepath.Join(c.Dir, "etcd.log"),
		// A loaded machine can starve it; the cluster cannot work without.
		RestartAfter: time.Second,
		Logf:         c.cfg.Logf,
	})
	if err := c.etcd.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		err := c.call(context.Background(), "GET", c.etcdURL+"/health", nil, nil)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd did not answer within a minute: %w%s", err, c.etcd.LogTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// writeNode writes node n's directories and Patroni configuration and
// makes its supervised Patroni process (not started).
func (c *Cluster) writeNode(n *Node, binDir string, a *account) error {
	logDir := filepath.Join(n.Dir, "log")
	for _, d := range []string{n.Dir, logDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if err := a.chown(d); err != nil {
			return err
		}
	}
	conf, err := json.MarshalIndent(c.patroniConfig(n, binDir), "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(n.Dir, "patroni.yml")
	if err := os.WriteFile(path, conf, 0o600); err != nil {
		return err
	}
	if err := a.chown(path); err != nil {
		return err
	}
	bin, err := lookPath("patroni")
	if err != nil {
		return err
	}
	n.patroni = proc.New(proc.Config{
		Name:       "patroni-" + n.Name,
		Argv:       []string{bin, path},
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + n.Dir, "LANG=C.UTF-8"},
		LogPath:    filepath.Join(c.Dir, "patroni-"+n.Name+".log"),
		Credential: a.credential(),
		Dir:        n.Dir,
		Logf:       c.cfg.Logf,
	})
	return nil
}

// patroniConfig is node n's Patroni configuration. The bootstrap part goes
// to etcd once, with the first node, and holds what every node shares:
// synchronous replication in strict mode (with no synchronous standby
// left, writes wait rather than go unreplicated: a 2xx is on two nodes),
// an immediate failover when the primary's PostgreSQL crashes
// (primary_start_timeout 0: no crash recovery in place while a synchronous
// standby could take over), and pg_rewind so that an old primary rejoins.
func (c *Cluster) patroniConfig(n *Node, binDir string) map[string]any {
	secs := func(d time.Duration) int { return int(d / time.Second) }
	params := map[string]string{
		"synchronous_commit":    "on",
		"wal_log_hints":         "on", // pg_rewind
		"full_page_writes":      "on", // pg_rewind
		"max_connections":       "300",
		"shared_buffers":        "128MB",
		"max_wal_senders":       "10",
		"max_replication_slots": "10",
		"wal_keep_size":         "512MB",
		"hot_standby":           "on",
	}
	maps.Copy(params, c.cfg.Settings)
	hba := []string{
		"local all all trust",
		"local replication all trust",
		"host all all 127.0.0.1/32 trust",
		"host replication all 127.0.0.1/32 trust",
	}
	addr := "127.0.0.1:" + strconv.Itoa(n.Port)
	api := "127.0.0.1:" + strconv.Itoa(n.APIPort)
	return map[string]any{
		"scope":     Scope,
		"namespace": "/service/",
		"name":      n.Name,
		"log":       map[string]any{"level": "INFO"},
		"restapi":   map[string]any{"listen": api, "connect_address": api},
		"etcd3":     map[string]any{"hosts": []string{strings.TrimPrefix(c.etcdURL, "http://")}},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl":                     secs(c.cfg.TTL),
				"loop_wait":               secs(c.cfg.LoopWait),
				"retry_timeout":           secs(c.cfg.RetryTimeout),
				"maximum_lag_on_failover": 1 << 20,
				"primary_start_timeout":   0,
				"synchronous_mode":        true,
				"synchronous_mode_strict": true,
				"synchronous_node_count":  1,
				"postgresql": map[string]any{
					"use_pg_rewind": true,
					"use_slots":     true,
					"remove_data_directory_on_rewind_failure":     true,
					"remove_data_directory_on_diverged_timelines": true,
					"parameters": params,
				},
			},
			"initdb": []any{map[string]string{"encoding": "UTF8"}, map[string]string{"locale": "C"}},
		},
		"postgresql": map[string]any{
			"listen":          addr,
			"connect_address": addr,
			"data_dir":        n.DataDir(),
			"bin_dir":         binDir,
			"pgpass":          filepath.Join(n.Dir, "pgpass"),
			"authentication": map[string]any{
				"superuser":   map[string]string{"username": "postgres", "password": "postgres"},
				"replication": map[string]string{"username": "replicator", "password": "replicator"},
				"rewind":      map[string]string{"username": "postgres", "password": "postgres"},
			},
			"pg_hba": hba,
			// Node-local: the socket and the log in the node's directory.
			"parameters": map[string]string{
				"unix_socket_directories":  n.Dir,
				"logging_collector":        "on",
				"log_directory":            filepath.Join(n.Dir, "log"),
				"log_filename":             "postgres.log",
				"log_rotation_age":         "0",
				"log_rotation_size":        "0",
				"log_truncate_on_rotation": "off",
				"log_line_prefix":          "%m [%p] ",
			},
			"basebackup":             []any{map[string]string{"checkpoint": "fast"}},
			"create_replica_methods": []string{"basebackup"},
		},
		"tags": map[string]any{"nofailover": false, "noloadbalance": false, "clonefrom": false, "nosync": false},
	}
}
