package whatsapptest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
)

func setup(t *testing.T) (*whatsapptest.Server, *whatsapp.Client, whatsapp.Credential) {
	t.Helper()
	srv := whatsapptest.NewServer()
	t.Cleanup(srv.Close)
	client := &whatsapp.Client{BaseURL: srv.URL() + "/v23.0", HTTP: &http.Client{Timeout: 5 * time.Second}}
	return srv, client, whatsapp.Credential{PhoneNumberID: "106540352242922", AccessToken: "tok-1"}
}

func text(to, body string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"to": to, "type": "text", "text": map[string]string{"body": body}})
	return b
}

func TestServerRecordsSuccessfulSends(t *testing.T) {
	t.Parallel()
	srv, client, cred := setup(t)
	ctx := context.Background()

	r1, err := client.Send(ctx, cred, text("16505551234", "Step 1"), "step-1")
	if err != nil {
		t.Fatal(err)
	}
	// Without the version prefix too.
	bare := &whatsapp.Client{BaseURL: srv.URL()}
	r2, err := bare.Send(ctx, cred, text("16505550000", "Hi"), "step-2")
	if err != nil {
		t.Fatal(err)
	}
	if r1.MessageID == "" || r1.MessageID == r2.MessageID || !strings.HasPrefix(r1.MessageID, "wamid.") {
		t.Errorf("message ids %q, %q: want distinct wamid.N", r1.MessageID, r2.MessageID)
	}

	got := srv.Sends()
	if len(got) != 2 || srv.Attempts() != 2 {
		t.Fatalf("sends %d attempts %d, want 2 and 2", len(got), srv.Attempts())
	}
	s := got[0]
	if s.PhoneNumberID != "106540352242922" || s.To != "16505551234" || s.CallbackData != "step-1" ||
		s.WAMID != r1.MessageID || s.Token != "tok-1" || s.Text != "Step 1" || s.At.IsZero() {
		t.Errorf("unexpected record %+v", s)
	}
	var body map[string]any
	if err := json.Unmarshal(s.Body, &body); err != nil || body["messaging_product"] != "whatsapp" {
		t.Errorf("body not kept as sent: %s", s.Body)
	}
	if to := srv.SendsTo("16505550000"); len(to) != 1 || to[0].Text != "Hi" || to[0].WAMID != r2.MessageID {
		t.Errorf("SendsTo = %+v", to)
	}
	if len(srv.SendsTo("nobody")) != 0 {
		t.Error("SendsTo of an unknown user must be empty")
	}
}

func TestServerDefaultRejects(t *testing.T) {
	t.Parallel()
	srv := whatsapptest.NewServer()
	t.Cleanup(srv.Close)
	tests := []struct {
		name, path, auth, body string
		status, code           int
	}{
		{"no token", "/v23.0/1/messages", "", `{"messaging_product":"whatsapp","to":"1"}`, 401, 190},
		{"empty bearer", "/1/messages", "Bearer ", `{"messaging_product":"whatsapp","to":"1"}`, 401, 190},
		{"not whatsapp", "/1/messages", "Bearer t", `{"to":"1"}`, 400, 100},
		{"no recipient", "/1/messages", "Bearer t", `{"messaging_product":"whatsapp"}`, 400, 100},
		{"not JSON", "/1/messages", "Bearer t", `hello`, 400, 100},
		{"unknown path", "/v23.0/1/media", "Bearer t", `{}`, 404, 100},
		{"bad version", "/latest/1/messages", "Bearer t", `{}`, 404, 100},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(http.MethodPost, srv.URL()+tt.path, strings.NewReader(tt.body))
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var eb struct {
			Error struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		_ = json.Unmarshal(raw, &eb)
		if resp.StatusCode != tt.status || eb.Error.Code != tt.code {
			t.Errorf("%s: got %d code %d (%s), want %d code %d", tt.name, resp.StatusCode, eb.Error.Code, raw, tt.status, tt.code)
		}
	}
	if n := len(srv.Sends()); n != 0 {
		t.Errorf("rejected requests must not count as sends: %d", n)
	}
}

func TestServerResponderCountsAttemptsPerCallback(t *testing.T) {
	t.Parallel()
	srv, client, cred := setup(t)
	srv.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		if req.CallbackData == "flaky" && attempt < 3 {
			return whatsapptest.Response{Status: 503, ErrorCode: 131016}
		}
		return whatsapptest.Default(req, attempt)
	})
	ctx := context.Background()
	var classes []whatsapp.Class
	for range 3 {
		_, err := client.Send(ctx, cred, text("1", "hello"), "flaky")
		c, _ := whatsapp.ClassOf(err)
		classes = append(classes, c)
	}
	if _, err := client.Send(ctx, cred, text("2", "steady"), "steady"); err != nil {
		t.Fatal(err)
	}
	if classes[0] != whatsapp.Ambiguous || classes[1] != whatsapp.Ambiguous || classes[2] != 0 {
		t.Errorf("classes %v: want ambiguous, ambiguous, success", classes)
	}
	if srv.Attempts() != 4 || len(srv.Sends()) != 2 {
		t.Errorf("attempts %d sends %d, want 4 and 2", srv.Attempts(), len(srv.Sends()))
	}

	srv.SetResponder(nil) // back to Default
	if _, err := client.Send(ctx, cred, text("1", "again"), "flaky"); err != nil {
		t.Fatalf("default responder restored: %v", err)
	}
}

func TestServerErrorShapesReachTheClient(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		resp       whatsapptest.Response
		class      whatsapp.Class
		retryAfter time.Duration
	}{
		{"throttled with hint", whatsapptest.Response{Status: 429, ErrorCode: 130429, RetryAfter: "3"}, whatsapp.Throttled, 3 * time.Second},
		{"pair rate", whatsapptest.Response{Status: 400, ErrorCode: 131056}, whatsapp.PairRate, 0},
		{"paused", whatsapptest.Response{Status: 401, ErrorCode: 190, Subcode: 463}, whatsapp.Paused, 0},
		{"permanent", whatsapptest.Response{Status: 400, ErrorCode: 131026}, whatsapp.Permanent, 0},
		{"bare 500", whatsapptest.Response{Status: 500}, whatsapp.Ambiguous, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, client, cred := setup(t)
			srv.SetResponder(func(whatsapptest.Send, int) whatsapptest.Response { return tt.resp })
			_, err := client.Send(context.Background(), cred, text("1", "x"), "s")
			var se *whatsapp.SendError
			if !errors.As(err, &se) {
				t.Fatalf("want SendError, got %v", err)
			}
			if se.Class != tt.class || se.RetryAfter != tt.retryAfter || se.Subcode != tt.resp.Subcode {
				t.Errorf("got %v", se)
			}
			if len(srv.Sends()) != 0 {
				t.Error("a failed, unrecorded send must not be delivered")
			}
		})
	}
}

func TestServerAmbiguousDeliveries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		resp      whatsapptest.Response
		timeout   time.Duration
		delivered int
	}{
		{"dropped after read, went out", whatsapptest.Response{DropAfterRead: true, Record: true}, time.Second, 1},
		{"dropped after read, lost", whatsapptest.Response{DropAfterRead: true}, time.Second, 0},
		{"500 but went out", whatsapptest.Response{Status: 500, ErrorCode: 131000, Record: true}, time.Second, 1},
		{"accepted, answer too late", whatsapptest.Response{Delay: 2 * time.Second}, 100 * time.Millisecond, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, client, cred := setup(t)
			client.HTTP = &http.Client{Timeout: tt.timeout}
			srv.SetResponder(func(whatsapptest.Send, int) whatsapptest.Response { return tt.resp })
			_, err := client.Send(context.Background(), cred, text("1", "maybe"), "s")
			if c, _ := whatsapp.ClassOf(err); c != whatsapp.Ambiguous {
				t.Errorf("class %v, want ambiguous (%v)", c, err)
			}
			got := srv.Sends()
			if len(got) != tt.delivered {
				t.Fatalf("delivered %d, want %d", len(got), tt.delivered)
			}
			if tt.delivered == 1 && (got[0].WAMID == "" || got[0].Text != "maybe") {
				t.Errorf("recorded send %+v", got[0])
			}
		})
	}
}

func TestServerWaitForSends(t *testing.T) {
	t.Parallel()
	srv, client, cred := setup(t)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = client.Send(context.Background(), cred, text(fmt.Sprint(i%4), fmt.Sprint(i)), fmt.Sprint("step-", i))
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.WaitForSends(ctx, 20); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	ids := map[string]bool{}
	for _, s := range srv.Sends() {
		ids[s.WAMID] = true
	}
	if len(ids) != 20 {
		t.Errorf("want 20 distinct WAMIDs, got %d", len(ids))
	}

	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	err := srv.WaitForSends(short, 21)
	if err == nil || !strings.Contains(err.Error(), "have 20") {
		t.Errorf("want a timeout saying how many arrived, got %v", err)
	}
}

func TestServerCloseAbandonsDelayedAnswers(t *testing.T) {
	t.Parallel()
	srv := whatsapptest.NewServer()
	srv.SetResponder(func(whatsapptest.Send, int) whatsapptest.Response {
		return whatsapptest.Response{Delay: time.Minute}
	})
	client := &whatsapp.Client{BaseURL: srv.URL()}
	errc := make(chan error, 1)
	go func() {
		_, err := client.Send(context.Background(), whatsapp.Credential{PhoneNumberID: "1", AccessToken: "t"}, text("1", "x"), "s")
		errc <- err
	}()
	if err := srv.WaitForSends(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	srv.Close()
	srv.Close() // idempotent
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close waited %s for a delayed answer", d)
	}
	if c, _ := whatsapp.ClassOf(<-errc); c != whatsapp.Ambiguous {
		t.Errorf("client class %v, want ambiguous", c)
	}
}

// Reset forgets what was received, attempt counts included, and keeps the
// responder.
func TestServerResetForgetsWhatWasReceived(t *testing.T) {
	t.Parallel()
	srv, client, cred := setup(t)
	srv.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		if attempt == 1 {
			return whatsapptest.Response{Status: 503, ErrorCode: 131016}
		}
		return whatsapptest.Default(req, attempt)
	})
	ctx := context.Background()
	for range 2 {
		_, _ = client.Send(ctx, cred, text("1", "before"), "cb")
	}
	if srv.Attempts() != 2 || len(srv.Sends()) != 1 {
		t.Fatalf("before Reset: attempts %d sends %d, want 2 and 1", srv.Attempts(), len(srv.Sends()))
	}
	srv.Reset()
	if srv.Attempts() != 0 || len(srv.Sends()) != 0 {
		t.Fatalf("after Reset: attempts %d sends %d, want 0 and 0", srv.Attempts(), len(srv.Sends()))
	}
	// The same callback's count starts again: the responder fails attempt 1.
	if _, err := client.Send(ctx, cred, text("1", "after"), "cb"); err == nil {
		t.Error("first attempt after Reset succeeded; want the responder's attempt 1 (503)")
	}
	if _, err := client.Send(ctx, cred, text("1", "after"), "cb"); err != nil {
		t.Fatalf("second attempt after Reset: %v", err)
	}
	if got := srv.Sends(); len(got) != 1 || got[0].Text != "after" {
		t.Errorf("sends after Reset = %+v; want only the one after", got)
	}
}
