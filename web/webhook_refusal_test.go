package web_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/web"
)

// BenchmarkWebhookRefusal is the handler's side of one refused flood post:
// an unsigned 8 MB post from an address past its failed signatures,
// answered 429 unread, without the network (no database either: nothing
// is looked up). make chaos's hostile flood gives the whole cost per
// refusal in the API process, connection and kernel included.
func BenchmarkWebhookRefusal(b *testing.B) {
	h := web.New(web.Config{WebhookFailureWindow: time.Hour}, nil, nil, nil, nil).Handler()
	post := func() int {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/whatsapp/acme", &countReader{left: 8 << 20})
		req.RemoteAddr = "198.51.100.7:4000"
		req.ContentLength = 8 << 20
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for range web.WebhookFailureLimitDefault {
		post()
	}
	if code := post(); code != http.StatusTooManyRequests {
		b.Fatalf("past the limit: %d, want 429", code)
	}
	b.ReportAllocs()
	for b.Loop() {
		post()
	}
}
