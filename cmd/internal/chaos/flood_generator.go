package chaos

// The hostile flood's generator: the strangers themselves, run in a process
// of their own (FloodCommand, a hidden subcommand of the binary that runs
// the harness), not in the harness. An attacker's CPU is on the attacker's
// machines; in the harness the flood's 200 senders took ~1.4 of this
// machine's 2 cores beside the real clients whose latency it judges, so the
// check measured the harness's own scheduler, not ordo (flood_process.go
// gives the process its own CPU budget).
//
// Protocol, over the process's standard streams: the harness writes one
// line of JSON (floodSpec) on stdin; the generator floods until stdin
// ends (or FloodSpec.For passes, a bound should the harness vanish without
// closing it), then writes one line of JSON (floodResult) on stdout and
// exits 0.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FloodCommand is the hidden subcommand that runs the flood generator
// (FloodMain): ordo-chaos's main, and the package's tests, dispatch on it.
const FloodCommand = "hostile-flood"

// floodSpec is what the harness asks of the generator.
type floodSpec struct {
	// URL is the API's base URL.
	URL string `json:"url"`
	// Slugs is one webhook tenant slug per concurrent stranger.
	Slugs []string `json:"slugs"`
	// BodyBytes is each body's size.
	BodyBytes int `json:"body_bytes"`
	// Source is the address the connections come from.
	Source string `json:"source"`
	// For bounds the flood if stdin never ends.
	For time.Duration `json:"for"`
}

// floodResult is what the generator reports when it ends.
type floodResult struct {
	// Sent is how many flood requests got an outcome.
	Sent int `json:"sent"`
	// Outcomes counts them by status ("connection closed": cut off).
	Outcomes map[string]int `json:"outcomes"`
	// Elapsed is how long it flooded.
	Elapsed time.Duration `json:"elapsed"`
}

// FloodMain is the flood generator's main: it reads a floodSpec from stdin,
// floods until stdin ends, and writes the floodResult to stdout.
func FloodMain(stdin io.Reader, stdout io.Writer) error {
	in := bufio.NewReader(stdin)
	line, err := in.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("read the flood's spec: %w", err)
	}
	var spec floodSpec
	if err := json.Unmarshal(line, &spec); err != nil {
		return fmt.Errorf("flood spec: %w", err)
	}
	if len(spec.Slugs) == 0 || spec.For <= 0 || spec.BodyBytes <= 0 {
		return fmt.Errorf("flood spec: slugs, for and body_bytes are required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), spec.For)
	defer cancel()
	go func() {
		// The end of stdin is the end of the flood.
		_, _ = io.Copy(io.Discard, in)
		cancel()
	}()
	res := flood(ctx, spec)
	return json.NewEncoder(stdout).Encode(res)
}

// flood runs len(spec.Slugs) strangers until ctx ends.
func flood(ctx context.Context, spec floodSpec) floodResult {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(spec.Source)}, Timeout: 5 * time.Second}
	client := &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true, MaxIdleConnsPerHost: -1, DialContext: dialer.DialContext},
		// An answer is all a stranger gets; nothing redirects here.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	var (
		mu  sync.Mutex
		res = floodResult{Outcomes: map[string]int{}}
		wg  sync.WaitGroup
	)
	start := time.Now()
	for i, slug := range spec.Slugs {
		wg.Go(func() {
			stranger(ctx, client, spec, i, slug, func(outcome string) {
				mu.Lock()
				res.Sent++
				res.Outcomes[outcome]++
				mu.Unlock()
			})
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res
}

// stranger posts again as soon as it is answered, half its bodies with a
// declared length (refused unread), half chunked, and reports each
// outcome; one cut off by the end of the flood has none.
func stranger(ctx context.Context, client *http.Client, spec floodSpec, i int, slug string, outcome func(string)) {
	for n := 0; ctx.Err() == nil; n++ {
		body := &hostileBody{left: spec.BodyBytes}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, spec.URL+"/webhooks/whatsapp/"+slug, body)
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.ContentLength = -1
		if (i+n)%2 == 0 {
			req.ContentLength = int64(spec.BodyBytes)
		}
		out := "connection closed"
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			out = strconv.Itoa(resp.StatusCode)
		} else if ctx.Err() != nil {
			return
		}
		outcome(out)
	}
}

// hostileBody is left bytes of a body that looks like the start of a
// webhook and goes on with padding, made as it is read (the generator holds
// none of it).
type hostileBody struct {
	left, off int
}

var hostilePattern = []byte(`{"object":"whatsapp_business_account","entry":[{"id":"` + strings.Repeat("A", 4000) + `"}]}` + "\n")

func (b *hostileBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && b.left > 0 {
		c := copy(p[n:min(len(p), n+b.left)], hostilePattern[b.off:])
		n += c
		b.left -= c
		b.off = (b.off + c) % len(hostilePattern)
	}
	return n, nil
}
