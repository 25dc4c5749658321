package chaos

// What a process's goroutines and open files are made of, read from the
// outside: its TCP sockets from /proc (which file descriptors are sockets,
// and each socket's ports and state), and from its /metrics the requests in
// flight and the database pool's connections. The soak judges the part of
// goroutines and open files that is left once the connections and requests
// are taken out, and the connections against what their clients hold, so
// that a slower machine's extra in-flight requests and its clients' extra
// keep-alive connections are not read as a leak, and a leak still is (issue
// 24: the API's goroutines 45 → 127 and open files 72 → 169 over an hour on
// a machine loaded 20–88, every one of them a client's connection, a
// request in flight or a pool connection).

import (
	"bufio"
	"context"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// tcpListen is /proc/net/tcp's state of a listening socket.
const tcpListen = 0x0A

// procSocket is one TCP socket a process holds open.
type procSocket struct {
	localPort, remotePort int
	state                 int
}

// procSockets lists the TCP sockets pid holds: the socket inodes among its
// file descriptors, looked up in its network namespace's tables. A socket
// closed by the process is not listed, whatever the kernel still keeps of
// it (TIME_WAIT).
func procSockets(pid int) ([]procSocket, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	ents, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return nil, err
	}
	held := make(map[string]bool, len(ents))
	for _, e := range ents {
		link, err := os.Readlink(dir + "/fd/" + e.Name())
		if err != nil {
			continue // closed meanwhile
		}
		if ino, ok := strings.CutPrefix(link, "socket:["); ok {
			held[strings.TrimSuffix(ino, "]")] = true
		}
	}
	var out []procSocket
	for _, table := range []string{"/net/tcp", "/net/tcp6"} {
		f, err := os.Open(dir + table)
		if err != nil {
			continue // no IPv6
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode …
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || fs[0] == "sl" || !held[fs[9]] {
				continue
			}
			lp, err1 := hexPort(fs[1])
			rp, err2 := hexPort(fs[2])
			st, err3 := strconv.ParseInt(fs[3], 16, 32)
			if err1 != nil || err2 != nil || err3 != nil {
				continue
			}
			out = append(out, procSocket{localPort: lp, remotePort: rp, state: int(st)})
		}
		f.Close()
	}
	return out, nil
}

// hexPort reads the port of /proc/net/tcp's "ADDR:PORT" (hexadecimal).
func hexPort(addr string) (int, error) {
	_, p, _ := strings.Cut(addr, ":")
	n, err := strconv.ParseInt(p, 16, 32)
	return int(n), err
}

// acceptedOn counts the connections among socks accepted on port (the
// listening socket itself left out).
func acceptedOn(socks []procSocket, port int) int {
	n := 0
	for _, s := range socks {
		if s.localPort == port && s.state != tcpListen {
			n++
		}
	}
	return n
}

// dialedTo counts the connections among socks to port.
func dialedTo(socks []procSocket, port int) int {
	n := 0
	for _, s := range socks {
		if s.remotePort == port && s.state != tcpListen {
			n++
		}
	}
	return n
}

// urlPort is the port of a URL ("http://127.0.0.1:8080/metrics"), 0 if it
// has none.
func urlPort(u string) int {
	p, err := url.Parse(u)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p.Port())
	return n
}

// soakMetrics is what the soak reads of a process's /metrics; -1 where a
// value was not found.
type soakMetrics struct {
	goroutines, inFlight, poolConns, poolMax int64
}

// readSoakMetrics scrapes url once, on a connection of its own that is
// closed after (it must not stay open and be counted as a client's).
func readSoakMetrics(ctx context.Context, url string) soakMetrics {
	out := soakMetrics{-1, -1, -1, -1}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return out
	}
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	fields := map[string]*int64{
		"go_goroutines":                &out.goroutines,
		"ordo_http_requests_in_flight": &out.inFlight,
		"ordo_db_pool_total_conns":     &out.poolConns,
		"ordo_db_pool_max_conns":       &out.poolMax,
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), " ")
		if p := fields[name]; ok && p != nil {
			if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
				*p = int64(v)
			}
		}
	}
	return out
}
