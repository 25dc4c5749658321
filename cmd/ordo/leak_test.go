package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/sql/sqltest"
	"github.com/ordo-dev/ordo/tenants"
)

// An API process (`ordo serve --role api`, a real process on a real
// Postgres) keeps nothing of its clients once they are gone: after each of
// several rounds of the soak's traffic — keep-alive REST clients, some
// giving up on a request mid-flight and reconnecting, signed and unsigned
// webhook deliveries, slow senders cut by the minimum rate, bodies
// abandoned half sent, wrong keys, lookups — and once the clients have
// closed their connections, the process's goroutines and its open files
// other than its database pool's come back to what they were after the
// first round. (issue 24's soak: the API's goroutines 45 → 127 and open
// files 72 → 169 over an hour; this tells a leak, which grows with every
// round, from load, which leaves with its clients.)
func TestAPIKeepsNothingOfItsClients(t *testing.T) {
	if testing.Short() {
		t.Skip("a real API process under several rounds of load")
	}
	t.Parallel()
	dbURL := sqltest.URL(t)
	key, err := tenants.GenerateMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cliEnv := &cli.Env{DatabaseURL: dbURL, MasterKeys: key.Format(), Stdout: &out, Stderr: &out, Logger: slog.New(slog.DiscardHandler)}
	if code := run(context.Background(), cliEnv, []string{"tenant", "create", "--slug", "acme"}); code != 0 {
		t.Fatalf("tenant create: exit %d: %s", code, out.String())
	}
	var created struct {
		APIKey string `json:"api_key"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &created); err != nil {
		t.Fatalf("tenant create printed %q: %v", out.String(), err)
	}
	const appSecret, phone = "leak-secret", "1000001"
	credFile := filepath.Join(t.TempDir(), "cred.json")
	cred := `{"phone_number_id":"` + phone + `","access_token":"token","app_secret":"` + appSecret + `","verify_token":"verify"}`
	if err := os.WriteFile(credFile, []byte(cred), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := run(context.Background(), cliEnv, []string{"credential", "set", "--tenant", "acme", "--name", "whatsapp", "--from-file", credFile}); code != 0 {
		t.Fatalf("credential set: exit %d: %s", code, out.String())
	}
	addr := freePort(t)
	api := startOrdo(t, "api", addr, []string{"DATABASE_URL=" + dbURL, "ORDO_MASTER_KEYS=" + key.Format()}, "--role", "api")
	base := "http://" + addr
	waitGet(t, api, base+"/readyz", time.Minute)

	slowDialer := &net.Dialer{}
	if c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).Dial("tcp", addr); err == nil {
		c.Close()
		slowDialer.LocalAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	defer tr.CloseIdleConnections()
	var seq int
	round := func(r int) {
		var wg sync.WaitGroup
		defer wg.Wait()
		post := func(ctx context.Context, path, auth string, body []byte, header ...string) (int, string) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if auth != "" {
				req.Header.Set("Authorization", "Bearer "+auth)
			}
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			resp, err := client.Do(req)
			if err != nil {
				return 0, err.Error()
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		// Keep-alive REST clients; every fourth request is given up on
		// almost at once (its connection is dropped; the next request
		// dials again), and a lookup and a wrong key go in between.
		for c := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 12 {
					id := fmt.Sprintf("r%d-c%d-m%d", r, c, i)
					body := []byte(`{"message_id":"` + id + `","conversation_id":"conv-` + strconv.Itoa(c) + `","type":"text","text":{"body":"hi"}}`)
					ctx, cancel := context.WithCancel(context.Background())
					if i%4 == 3 {
						ctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
					}
					if status, answer := post(ctx, "/v1/messages", created.APIKey, body); ctx.Err() == nil && status != http.StatusAccepted && status != http.StatusServiceUnavailable {
						t.Errorf("POST /v1/messages %s: %d %s", id, status, answer)
					}
					cancel()
					if i%6 == 0 {
						resp, err := client.Get(base + "/v1/messages/" + id)
						if err == nil {
							_, _ = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
						_, _ = post(context.Background(), "/v1/messages", "ordo_wrongkey_0000000000000000", body)
					}
				}
			}()
		}
		// Meta's deliveries, signed, and strangers' unsigned ones.
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 6 {
					body := webhookBody(phone, fmt.Sprintf("wamid.r%d-w%d-%d", r, w, i))
					if status, answer := post(context.Background(), "/webhooks/whatsapp/acme", "", body, "X-Hub-Signature-256", whatsapp.Sign(appSecret, body)); status != http.StatusOK && status != http.StatusServiceUnavailable {
						t.Errorf("signed webhook: %d %s", status, answer)
					}
					_, _ = post(context.Background(), "/webhooks/whatsapp/acme", "", body, "X-Hub-Signature-256", "sha256=00")
				}
			}()
		}
		// Slow senders: a byte a second until the server cuts them
		// (WebhookMinRate after its grace), and bodies abandoned half sent;
		// from an address of their own where the machine has one, so that
		// they leave Meta's address its share of the body slots.
		for s := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := slowDialer.Dial("tcp", addr)
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				fmt.Fprintf(c, "POST /webhooks/whatsapp/acme HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 4096\r\nX-Hub-Signature-256: sha256=00\r\n\r\n", addr)
				if s >= 2 {
					_, _ = c.Write([]byte(`{"object":`))
					return // gone, half a body sent
				}
				_ = c.SetDeadline(time.Now().Add(time.Minute))
				buf := make([]byte, 1)
				for {
					if _, err := c.Write([]byte(" ")); err != nil {
						return
					}
					_ = c.SetReadDeadline(time.Now().Add(time.Second))
					if _, err := c.Read(buf); err == nil || !isTimeout(err) {
						return // answered (503) or closed: cut
					}
				}
			}()
		}
	}

	// What the process holds once its clients are gone: goroutines, and
	// open files less the pool's connections (the pool keeps what it grew
	// to, up to its size, for pgxpool's idle time).
	settled := func(what string, want *[2]int64) [2]int64 {
		tr.CloseIdleConnections()
		deadline := time.Now().Add(time.Minute)
		var got [2]int64
		for {
			m := scrape(t, base+"/metrics")
			got = [2]int64{m["go_goroutines"], m["process_open_fds"] - m["ordo_db_pool_total_conns"]}
			if want != nil && got[0] <= want[0]+5 && got[1] <= want[1]+5 {
				t.Logf("%s: goroutines %d, open files beyond the pool %d (pool %d)", what, got[0], got[1], m["ordo_db_pool_total_conns"])
				return got
			}
			if want == nil && m["ordo_http_requests_in_flight"] == 1 && openConns(t, api.Pid(), addr) == 0 {
				// Only this scrape's request, no client's connection; what
				// the round started may still be ending (the pool's
				// connects): the least of a few readings.
				for range 10 {
					time.Sleep(200 * time.Millisecond)
					m := scrape(t, base+"/metrics")
					got = [2]int64{min(got[0], m["go_goroutines"]), min(got[1], m["process_open_fds"]-m["ordo_db_pool_total_conns"])}
				}
				t.Logf("%s: goroutines %d, open files beyond the pool %d (pool %d)", what, got[0], got[1], m["ordo_db_pool_total_conns"])
				return got
			}
			if time.Now().After(deadline) {
				if want != nil {
					t.Fatalf("%s: goroutines %d and open files beyond the pool %d a minute after the clients left; after the first round %d and %d, so each round leaves some behind%s",
						what, got[0], got[1], want[0], want[1], api.LogTail())
				}
				t.Fatalf("%s: connections still open a minute after the clients left%s", what, api.LogTail())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	seq++
	round(seq)
	first := settled("after round 1", nil)
	for seq < 4 {
		seq++
		round(seq)
		settled(fmt.Sprintf("after round %d", seq), &first)
	}
}

// isTimeout reports whether err is a read deadline passing.
func isTimeout(err error) bool {
	var ne net.Error
	return err != nil && errors.As(err, &ne) && ne.Timeout()
}

// webhookBody is Meta's delivery of one text message from an end user.
func webhookBody(phone, wamid string) []byte {
	return []byte(`{"object":"whatsapp_business_account","entry":[{"id":"WABA0","changes":[{"field":"messages","value":{"messaging_product":"whatsapp",` +
		`"metadata":{"display_phone_number":"15550001111","phone_number_id":"` + phone + `"},` +
		`"contacts":[{"profile":{"name":"User"},"wa_id":"16505551234"}],` +
		`"messages":[{"from":"16505551234","id":"` + wamid + `","timestamp":"` + strconv.FormatInt(time.Now().Unix(), 10) + `","type":"text","text":{"body":"hello"}}]}}]}]}`)
}

// scrape reads a process's /metrics into name → value (unlabelled series
// only), on a connection closed after.
func scrape(t *testing.T, url string) map[string]int64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if name, v, ok := strings.Cut(sc.Text(), " "); ok && !strings.HasPrefix(name, "#") && !strings.Contains(name, "{") {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				out[name] = int64(f)
			}
		}
	}
	return out
}

// openConns counts the connections to addr that process pid accepted and
// still holds, from /proc (the listening socket left out).
func openConns(t *testing.T, pid int, addr string) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	hexPort := fmt.Sprintf(":%04X", p)
	held := map[string]bool{}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); err == nil && strings.HasPrefix(link, "socket:[") {
			held[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	n := 0
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) >= 10 && strings.HasSuffix(f[1], hexPort) && f[3] != "0A" && held[f[9]] {
				n++
			}
		}
	}
	return n
}
