package whatsapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

const testToken = "EAAG-test-token-never-shown"

// captured is one request the fake Graph API received.
type captured struct {
	Path   string
	Header http.Header
	Body   map[string]any
}

// setup starts a fake Graph API answering with answer and returns a client
// pointed at it plus the requests it saw.
func setup(t *testing.T, answer http.HandlerFunc) (*Client, Credential, func() []captured) {
	t.Helper()
	var (
		mu  sync.Mutex
		got []captured
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		mu.Lock()
		got = append(got, captured{Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(srv.Close)
	client := &Client{BaseURL: srv.URL + "/v23.0", HTTP: &http.Client{Timeout: 5 * time.Second}}
	cred := Credential{PhoneNumberID: "106540352242922", AccessToken: testToken}
	return client, cred, func() []captured {
		mu.Lock()
		defer mu.Unlock()
		return append([]captured(nil), got...)
	}
}

func metaError(status, code, subcode int, message string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"message":%q,"type":"OAuthException","code":%d,"error_subcode":%d,"fbtrace_id":"AbCdEf"}}`,
			message, code, subcode)
	}
}

var textMessage = json.RawMessage(`{"to":"16505551234","type":"text","text":{"body":"Step 1"}}`)

func assertNoToken(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), testToken) {
		t.Errorf("error text leaks the access token: %s", err)
	}
}

func TestSendSuccess(t *testing.T) {
	t.Parallel()
	client, cred, requests := setup(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"messaging_product":"whatsapp","contacts":[{"input":"16505551234","wa_id":"16505551234"}],"messages":[{"id":"wamid.HBgLMTY1MDM4Nzk0MzkVAgARGBI1"}]}`)
	})
	// A message that tries to set the fields Send owns is overridden.
	msg := json.RawMessage(`{"to":"16505551234","type":"text","text":{"body":"Step 1"},"messaging_product":"sms","biz_opaque_callback_data":"forged"}`)

	res, err := client.Send(context.Background(), cred, msg, "step-42")
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if res.MessageID != "wamid.HBgLMTY1MDM4Nzk0MzkVAgARGBI1" {
		t.Errorf("MessageID = %q", res.MessageID)
	}

	reqs := requests()
	if len(reqs) != 1 {
		t.Fatalf("want 1 request, got %d", len(reqs))
	}
	r := reqs[0]
	if r.Path != "/v23.0/106540352242922/messages" {
		t.Errorf("path = %q", r.Path)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+testToken {
		t.Errorf("Authorization = %q", got)
	}
	if got := r.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q", got)
	}
	want := map[string]any{
		"messaging_product":        "whatsapp",
		"to":                       "16505551234",
		"type":                     "text",
		"biz_opaque_callback_data": "step-42",
	}
	for k, v := range want {
		if r.Body[k] != v {
			t.Errorf("body[%s] = %v, want %v", k, r.Body[k], v)
		}
	}
	if text, _ := r.Body["text"].(map[string]any); text["body"] != "Step 1" {
		t.Errorf("text.body = %v", r.Body["text"])
	}
}

func TestSendBaseURLTrailingSlash(t *testing.T) {
	t.Parallel()
	client, cred, requests := setup(t, func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"messages":[{"id":"wamid.1"}]}`)
	})
	client.BaseURL += "/"
	if _, err := client.Send(context.Background(), cred, textMessage, ""); err != nil {
		t.Fatal(err)
	}
	r := requests()[0]
	if r.Path != "/v23.0/106540352242922/messages" {
		t.Errorf("path = %q", r.Path)
	}
	if _, ok := r.Body["biz_opaque_callback_data"]; ok {
		t.Error("an empty callback data must not be sent")
	}
}

func TestSendErrorClasses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		answer  http.HandlerFunc
		class   Class
		status  int
		code    int
		subcode int
	}{
		{"expired token", metaError(401, 190, 463, "Error validating access token: Session has expired"), Paused, 401, 190, 463},
		{"auth exception", metaError(401, 0, 0, "(#0) AuthException"), Paused, 401, 0, 0},
		{"permission denied", metaError(403, 10, 0, "(#10) Application does not have permission"), Paused, 403, 10, 0},
		{"permission range", metaError(403, 200, 0, "(#200) Permissions error"), Paused, 403, 200, 0},
		{"policy block", metaError(403, 368, 0, "Temporarily blocked for policies violations"), Paused, 403, 368, 0},
		{"account locked", metaError(403, 131031, 0, "Account has been locked"), Paused, 403, 131031, 0},
		{"throughput", metaError(429, 130429, 0, "(#130429) Rate limit hit"), Throttled, 429, 130429, 0},
		{"app rate limit", metaError(400, 4, 0, "(#4) Application request limit reached"), Throttled, 400, 4, 0},
		{"WABA rate limit", metaError(429, 80007, 0, "(#80007) Rate limit issues"), Throttled, 429, 80007, 0},
		{"pair rate", metaError(400, 131056, 0, "(#131056) (Business Account, Consumer Account) pair rate limit hit"), PairRate, 400, 131056, 0},
		{"generic", metaError(500, 131000, 0, "Something went wrong"), Ambiguous, 500, 131000, 0},
		{"service unavailable", metaError(503, 131016, 0, "Service unavailable"), Ambiguous, 503, 131016, 0},
		{"undeliverable", metaError(400, 131026, 0, "Message Undeliverable"), Permanent, 400, 131026, 0},
		{"re-engagement", metaError(400, 131047, 0, "Re-engagement message"), Permanent, 400, 131047, 0},
		{"invalid parameter", metaError(400, 100, 2494010, "Invalid parameter"), Permanent, 400, 100, 2494010},
		{"missing parameter", metaError(400, 131008, 0, "Required parameter is missing"), Permanent, 400, 131008, 0},
		{"parameter value", metaError(400, 131009, 0, "Parameter value is not valid"), Permanent, 400, 131009, 0},
		{"template", metaError(404, 132001, 0, "Template name does not exist in the translation"), Permanent, 404, 132001, 0},
		{"unsupported type", metaError(400, 131051, 0, "Unsupported message type"), Permanent, 400, 131051, 0},
		{"unknown 4xx code", metaError(400, 777777, 0, "Something new"), Permanent, 400, 777777, 0},
		{"bare 500", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "<html>upstream error</html>", http.StatusInternalServerError)
		}, Ambiguous, 500, NoCode, 0},
		{"bare 502", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) }, Ambiguous, 502, NoCode, 0},
		{"bare 429", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTooManyRequests) }, Throttled, 429, NoCode, 0},
		{"bare 400", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadRequest) }, Permanent, 400, NoCode, 0},
		{"quoted code", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"error":{"message":"pair rate","code":"131056"}}`)
		}, PairRate, 429, 131056, 0},
		{"2xx without id", func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, `{"messaging_product":"whatsapp","messages":[]}`)
		}, Ambiguous, 200, NoCode, 0},
		{"2xx not JSON", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, `ok`) }, Ambiguous, 200, NoCode, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			client, cred, _ := setup(t, tt.answer)
			res, err := client.Send(context.Background(), cred, textMessage, "step-1")
			if err == nil {
				t.Fatalf("want error, got %+v", res)
			}
			assertNoToken(t, err)
			var se *SendError
			if !errors.As(err, &se) {
				t.Fatalf("want *SendError, got %T: %v", err, err)
			}
			if se.Class != tt.class || se.HTTPStatus != tt.status || se.Code != tt.code || se.Subcode != tt.subcode {
				t.Errorf("got class %s status %d code %d subcode %d, want %s %d %d %d (%v)",
					se.Class, se.HTTPStatus, se.Code, se.Subcode, tt.class, tt.status, tt.code, tt.subcode, err)
			}
		})
	}
}

func TestSendErrorKeepsMetaDiagnostics(t *testing.T) {
	t.Parallel()
	client, cred, _ := setup(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"message":"(#131047) Re-engagement message","type":"OAuthException","code":131047,
			"error_data":{"messaging_product":"whatsapp","details":"Message failed to send because more than 24 hours have passed"},
			"fbtrace_id":"Az8or2yhqkZfEZ-_4Qn_Bam"}}`)
	})
	_, err := client.Send(context.Background(), cred, textMessage, "")
	var se *SendError
	if !errors.As(err, &se) {
		t.Fatal(err)
	}
	if se.FBTraceID != "Az8or2yhqkZfEZ-_4Qn_Bam" {
		t.Errorf("FBTraceID = %q", se.FBTraceID)
	}
	if !strings.Contains(err.Error(), "more than 24 hours") || !strings.Contains(err.Error(), "code 131047") {
		t.Errorf("error text lacks Meta's diagnosis: %s", err)
	}
}

func TestSendHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header func() string
		min    time.Duration
		max    time.Duration
	}{
		{"seconds", func() string { return "17" }, 17 * time.Second, 17 * time.Second},
		{"http date", func() string { return time.Now().Add(2 * time.Minute).UTC().Format(http.TimeFormat) }, 110 * time.Second, 2 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			client, cred, _ := setup(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Retry-After", tt.header())
				w.WriteHeader(http.StatusTooManyRequests)
				fmt.Fprint(w, `{"error":{"message":"(#130429) Rate limit hit","code":130429}}`)
			})
			_, err := client.Send(context.Background(), cred, textMessage, "")
			var se *SendError
			if !errors.As(err, &se) {
				t.Fatal(err)
			}
			if se.Class != Throttled {
				t.Errorf("class = %s", se.Class)
			}
			if se.RetryAfter < tt.min || se.RetryAfter > tt.max {
				t.Errorf("RetryAfter = %s, want within [%s, %s]", se.RetryAfter, tt.min, tt.max)
			}
		})
	}
}

func TestSendConnectionDroppedAfterRequestIsAmbiguous(t *testing.T) {
	t.Parallel()
	client, cred, requests := setup(t, func(w http.ResponseWriter, _ *http.Request) {
		// The request was read in full (by setup); vanish without answering.
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			panic(err)
		}
		conn.Close()
	})
	_, err := client.Send(context.Background(), cred, textMessage, "step-1")
	assertNoToken(t, err)
	if c, _ := ClassOf(err); c != Ambiguous {
		t.Fatalf("class = %v, want ambiguous (%v)", c, err)
	}
	if SafeToRetry(err) {
		t.Error("a dropped connection after the request must not be safe to retry")
	}
	if n := len(requests()); n != 1 {
		t.Errorf("the client must not resend on its own: %d requests", n)
	}
}

func TestSendTimeoutAfterRequestIsAmbiguous(t *testing.T) {
	t.Parallel()
	client, cred, _ := setup(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
		}
	})
	client.HTTP = &http.Client{Timeout: 150 * time.Millisecond}
	_, err := client.Send(context.Background(), cred, textMessage, "")
	assertNoToken(t, err)
	if c, _ := ClassOf(err); c != Ambiguous {
		t.Fatalf("class = %v, want ambiguous (%v)", c, err)
	}
	if !IsRetryable(err) {
		t.Error("a timeout is retryable")
	}
}

func TestSendCallerCancelAfterRequestIsAmbiguous(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	client, cred, _ := setup(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	_, err := client.Send(ctx, cred, textMessage, "")
	if c, _ := ClassOf(err); c != Ambiguous {
		t.Fatalf("class = %v, want ambiguous (%v)", c, err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("want context.Canceled in the chain, got %v", err)
	}
}

func TestSendCancelledBeforeRequestIsRetry(t *testing.T) {
	t.Parallel()
	client, cred, requests := setup(t, func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"messages":[{"id":"wamid.1"}]}`)
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := client.Send(ctx, cred, textMessage, "")
	if c, _ := ClassOf(err); c != Retry {
		t.Fatalf("class = %v, want retry (%v)", c, err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("want context.Canceled in the chain, got %v", err)
	}
	if n := len(requests()); n != 0 {
		t.Errorf("nothing should have been sent, got %d requests", n)
	}
}

func TestSendConnectionRefusedIsRetry(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	client := &Client{BaseURL: "http://" + addr + "/v23.0", HTTP: &http.Client{Timeout: 2 * time.Second}}
	_, err = client.Send(context.Background(), Credential{PhoneNumberID: "1", AccessToken: testToken}, textMessage, "")
	assertNoToken(t, err)
	if c, _ := ClassOf(err); c != Retry {
		t.Fatalf("class = %v, want retry (%v)", c, err)
	}
	if !SafeToRetry(err) {
		t.Error("a refused connection is safe to retry")
	}
}

func TestSendRejectsBadInput(t *testing.T) {
	t.Parallel()
	client, cred, requests := setup(t, func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"messages":[{"id":"wamid.1"}]}`)
	})
	tests := []struct {
		name  string
		cred  Credential
		msg   json.RawMessage
		class Class
	}{
		{"no token", Credential{PhoneNumberID: "1"}, textMessage, Paused},
		{"no phone number id", Credential{AccessToken: testToken}, textMessage, Paused},
		{"array message", cred, json.RawMessage(`[1]`), Permanent},
		{"null message", cred, json.RawMessage(`null`), Permanent},
		{"broken JSON", cred, json.RawMessage(`{"to":`), Permanent},
	}
	for _, tt := range tests {
		_, err := client.Send(context.Background(), tt.cred, tt.msg, "")
		if c, _ := ClassOf(err); c != tt.class {
			t.Errorf("%s: class = %v, want %s (%v)", tt.name, c, tt.class, err)
		}
		assertNoToken(t, err)
	}
	if n := len(requests()); n != 0 {
		t.Errorf("bad input must not reach Meta: %d requests", n)
	}
}

func TestSendScrubsTokenEchoedByServer(t *testing.T) {
	t.Parallel()
	client, cred, _ := setup(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"Malformed access token %s","code":190}}`,
			strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	})
	_, err := client.Send(context.Background(), cred, textMessage, "")
	assertNoToken(t, err)
	if !strings.Contains(err.Error(), "Malformed access token "+redacted) {
		t.Errorf("unexpected text: %s", err)
	}
}

func TestSendLimitsResponseBody(t *testing.T) {
	t.Parallel()
	client, cred, _ := setup(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"code":100,"message":"`+strings.Repeat("x", 3<<20)+`"}}`)
	})
	_, err := client.Send(context.Background(), cred, textMessage, "")
	if c, _ := ClassOf(err); c != Permanent {
		t.Fatalf("class = %v (%v)", c, err)
	}
	if len(err.Error()) > 4096 {
		t.Errorf("error text is %d bytes: the answer was not bounded", len(err.Error()))
	}
}

// Concurrent sends reuse their connections: every tenant's sends go to one
// host, and with net/http's default of two idle connections per host, 8
// workers sending at once opened a new connection (for Meta, a TLS
// handshake) for most sends.
func TestConcurrentSendsReuseConnections(t *testing.T) {
	t.Parallel()
	const workers, rounds = 8, 10
	var opened sync.Map
	var mu sync.Mutex
	conns := 0
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(5 * time.Millisecond) // the workers' sends overlap
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"messages":[{"id":"wamid.x"}]}`)
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			if _, seen := opened.LoadOrStore(c, true); !seen {
				mu.Lock()
				conns++
				mu.Unlock()
			}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	client := &Client{BaseURL: srv.URL + "/v23.0", HTTP: NewHTTPClient(5*time.Second, workers)}
	cred := Credential{PhoneNumberID: "106540352242922", AccessToken: testToken}
	msg := json.RawMessage(`{"to":"16505551234","type":"text","text":{"body":"hi"}}`)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				if _, err := client.Send(context.Background(), cred, msg, fmt.Sprintf("step-%d-%d", w, i)); err != nil {
					t.Errorf("send: %v", err)
					return
				}
				// A drain records the send before its next one: every
				// connection is back in the pool, unused, meanwhile.
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	// A connection being dialed while another comes back can be one more
	// (net/http races the two); with two kept per host it was 62
	// here.
	if conns > 2*workers {
		t.Fatalf("%d sends by %d workers opened %d connections; want at most %d", workers*rounds, workers, conns, 2*workers)
	}
}
