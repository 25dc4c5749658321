package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// benchLoad is what a scenario offers. Message i goes to conversation
// i % convs as that conversation's message i / convs, and conversation c
// belongs to tenant c % tenants: every conversation's messages are spread
// over the whole run, as a real conversation's messages trickle in.
type benchLoad struct {
	scenario    string
	tenants     int
	convs       int
	perConv     int           // spread, hot: messages per conversation
	total       int           // backlog: messages in all
	rate        int           // latency: offered messages per second
	duration    time.Duration // latency: how long it offers
	backlog     bool          // queue everything first, then drain
	concurrency int           // concurrent clients of a closed loop
	// warmup marks the load offered before a measured open-loop run: the
	// same conversations, message ids "w<i>", never judged.
	warmup bool
}

// body is message i's REST body.
func (l benchLoad) body(i int) []byte {
	if l.warmup {
		return restBodyID("w"+strconv.Itoa(i), l.conv(i))
	}
	return restBody(i, l.conv(i))
}

// messages is how many messages the load offers.
func (l benchLoad) messages() int {
	switch {
	case l.rate > 0:
		return int(float64(l.rate) * l.duration.Seconds())
	case l.backlog:
		return l.total
	}
	return l.convs * l.perConv
}

// openLoop: the latency scenario offers on a clock, whatever the system
// does; the others offer the next message as soon as the last was accepted.
func (l benchLoad) openLoop() bool { return l.rate > 0 }

func (l benchLoad) conv(i int) int { return i % l.convs }

func (l benchLoad) tenant(i int) int { return l.conv(i) % l.tenants }

// conversationID is conversation c's id, phone-number shaped; it is also the
// send's "to", which is how the fake Cloud API tells conversations apart.
func conversationID(c int) string { return strconv.Itoa(15550000000 + c) }

// messageID is message i's id, and its text body: the fake Cloud API sees
// the body, so a send names its message.
func messageID(i int) string { return "m" + strconv.Itoa(i) }

// messageIndex is the inverse of messageID; -1 for anything else.
func messageIndex(text string) int {
	if len(text) < 2 || text[0] != 'm' {
		return -1
	}
	i, err := strconv.Atoi(text[1:])
	if err != nil {
		return -1
	}
	return i
}

// restBody is message i as POST /v1/messages takes it, the same bytes for
// every HTTP system.
func restBody(i, conv int) []byte { return restBodyID(messageID(i), conv) }

func restBodyID(id string, conv int) []byte {
	b, _ := json.Marshal(map[string]any{
		"message_id":      id,
		"conversation_id": conversationID(conv),
		"type":            "text",
		"text":            map[string]string{"body": id},
	})
	return b
}

// offered is what the load generator saw of each message.
type offered struct {
	// sent is when message i was offered: the request's start, or in an open
	// loop the moment it was due (so a late generator does not hide delay).
	sent []time.Time
	// accepted is when its acceptance came back.
	accepted []time.Time
	// retries counts offers repeated after a 429, a 5xx or a broken connection.
	retries atomic.Int64
	// start and end bound the offering.
	start, end time.Time
}

// offerFunc accepts message i or fails; a retryable failure is retried.
type offerFunc func(ctx context.Context, i int) error

// errRetry marks a failure worth offering the message again.
var errRetry = errors.New("retryable")

// offer runs l's load through fn: a closed loop of l.concurrency clients,
// each owning the conversations c with c % concurrency equal to its number
// and offering their messages in order, or an open loop at l.rate. Either way
// a conversation's message is offered only after its previous one was
// accepted, so the order each conversation must be sent in is known.
func offer(ctx context.Context, l benchLoad, fn offerFunc) (*offered, error) {
	n := l.messages()
	o := &offered{sent: make([]time.Time, n), accepted: make([]time.Time, n)}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	try := func(i int, due time.Time) {
		if due.IsZero() {
			due = time.Now()
		}
		o.sent[i] = due
		for attempt := 0; ; attempt++ {
			err := fn(ctx, i)
			if err == nil {
				o.accepted[i] = time.Now()
				return
			}
			if !errors.Is(err, errRetry) || attempt >= 20 || ctx.Err() != nil {
				cancel(fmt.Errorf("offer %s: %w", messageID(i), err))
				return
			}
			o.retries.Add(1)
			time.Sleep(min(time.Duration(10<<attempt)*time.Millisecond, time.Second))
		}
	}

	o.start = time.Now()
	var wg sync.WaitGroup
	if !l.openLoop() {
		clients := min(l.concurrency, l.convs)
		for w := range clients {
			wg.Go(func() {
				for i := 0; i < n && ctx.Err() == nil; i++ {
					if l.conv(i)%clients == w {
						try(i, time.Time{})
					}
				}
			})
		}
	} else {
		// done[i] closes when message i is accepted; message i waits for
		// message i-convs, its conversation's previous one.
		done := make([]chan struct{}, n)
		for i := range done {
			done[i] = make(chan struct{})
		}
		inflight := make(chan struct{}, 2048)
		interval := time.Second / time.Duration(l.rate)
		for i := 0; i < n && ctx.Err() == nil; i++ {
			due := o.start.Add(time.Duration(i) * interval)
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
			inflight <- struct{}{}
			wg.Go(func() {
				defer func() { <-inflight }()
				defer close(done[i])
				if i >= l.convs {
					select {
					case <-done[i-l.convs]:
					case <-ctx.Done():
						return
					}
				}
				try(i, due)
			})
		}
	}
	wg.Wait()
	o.end = time.Now()
	if err := context.Cause(ctx); err != nil {
		return o, err
	}
	return o, nil
}

// restClient posts messages to one system's REST ingest endpoint.
type restClient struct {
	http *http.Client
	url  string   // …/v1/messages
	keys []string // API key per tenant
	load benchLoad
}

func newRESTClient(addr string, keys []string, l benchLoad) *restClient {
	conns := l.concurrency
	if l.openLoop() {
		conns = 512
	}
	return &restClient{
		http: &http.Client{
			Timeout: 30 * time.Second,
			Transport: &http.Transport{
				MaxIdleConns:        conns,
				MaxIdleConnsPerHost: conns,
				IdleConnTimeout:     time.Minute,
			},
		},
		url:  "http://" + addr + "/v1/messages",
		keys: keys,
		load: l,
	}
}

// post offers message i: 200 or 202 accept it; 429, 5xx and a broken
// connection are retried; anything else is a broken bench.
func (c *restClient) post(ctx context.Context, i int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(c.load.body(i)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.keys[c.load.tenant(i)])
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("%w: %v", errRetry, err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusAccepted:
		return nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return fmt.Errorf("%w: %s", errRetry, resp.Status)
	}
	return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
}

func (c *restClient) close() { c.http.CloseIdleConnections() }
