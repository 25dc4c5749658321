package chaos

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// chaosAppSecret is every chaos tenant's Meta app secret: it signs the
// webhooks Meta's side of the run sends.
const chaosAppSecret = "chaos-app-secret"

// chaosMeta plays the rest of Meta: it sends ordo the webhooks of the
// WhatsApp channel, through the API process that the run kills and over the
// Postgres that it restarts. A status webhook ("sent") follows every send
// the provider delivered, the way Meta reports a message that went out even
// when its answer was lost (which lets a reconciling tenant settle an
// ambiguous send without a resend); inbound messages of some conversations
// come as message webhooks, delivered 1 to 3 times. Like Meta, it redelivers
// whatever was not answered 200.
type chaosMeta struct {
	r   *run
	api *chaosClient

	mu       sync.Mutex
	next     int // sends of the provider taken up for a status
	inFlight int // statuses taken up and not answered yet
	statuses chaosMetaRecord
}

// chaosMetaRecord counts the status webhooks.
type chaosMetaRecord struct {
	// taken counts the deliveries taken up for a status; sent the statuses
	// answered 200.
	taken, sent, retries, unanswered int
	refused                          []string // answered 4xx
}

func newChaosMeta(r *run) *chaosMeta {
	m := &chaosMeta{r: r, api: newChaosClient(r.apiURL)}
	m.api.observe = r.answers.add
	return m
}

// chaosWebhookBody is one webhook delivery for a tenant's number, holding either
// messages or statuses.
func chaosWebhookBody(pnid string, value map[string]any) []byte {
	value["messaging_product"] = "whatsapp"
	value["metadata"] = map[string]string{"display_phone_number": "1555" + pnid, "phone_number_id": pnid}
	body, _ := json.Marshal(map[string]any{
		"object": "whatsapp_business_account",
		"entry": []any{map[string]any{
			"id":      "chaos-waba-" + pnid,
			"changes": []any{map[string]any{"field": "messages", "value": value}},
		}},
	})
	return body
}

// chaosSignWebhook is Meta's X-Hub-Signature-256 of body.
func chaosSignWebhook(body []byte) string {
	mac := hmac.New(sha256.New, []byte(chaosAppSecret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// postWebhook delivers body to tenant's webhook once.
func (c *chaosClient) postWebhook(ctx context.Context, slug string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/webhooks/whatsapp/"+slug, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Hub-Signature-256", chaosSignWebhook(body))
	return c.send(req)
}

// chaosInboundWebhook is the webhook of an end user's text message.
func chaosInboundWebhook(pnid, from, wamid, text string) []byte {
	return chaosWebhookBody(pnid, map[string]any{
		"contacts": []any{map[string]any{"profile": map[string]string{"name": "Chaos " + from}, "wa_id": from}},
		"messages": []any{map[string]any{
			"from": from, "id": wamid, "timestamp": strconv.FormatInt(time.Now().Unix(), 10),
			"type": "text", "text": map[string]string{"body": text},
		}},
	})
}

// runStatuses reports the provider's deliveries as status webhooks until
// ctx ends. Most statuses follow their send at once; one in four comes 2 to
// 5 seconds late, past a reconciling tenant's wait, so that ambiguous sends
// are settled both ways: by a status, and by a resend.
func (m *chaosMeta) runStatuses(ctx context.Context) {
	slugOf := make(map[string]string)
	for _, t := range m.r.tenants {
		slugOf[t.phoneNumberID] = t.slug
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, 64) // webhook deliveries at once
	for {
		sends := m.r.provider.Sends()
		m.mu.Lock()
		fresh := sends[m.next:]
		m.next = len(sends)
		m.inFlight += len(fresh)
		m.mu.Unlock()
		for _, s := range fresh {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if h := chaosHash(m.r.cfg.Seed, s.CallbackData+s.Text, 7); h%4 == 0 {
					select {
					case <-ctx.Done():
					case <-time.After(2*time.Second + time.Duration(h%3000)*time.Millisecond):
					}
				}
				select {
				case slots <- struct{}{}:
					defer func() { <-slots }()
				case <-ctx.Done():
				}
				m.deliverStatus(ctx, slugOf[s.PhoneNumberID], s)
			}()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// deliverStatus sends one "sent" status until it is answered 200.
func (m *chaosMeta) deliverStatus(ctx context.Context, slug string, s chaosSend) {
	st := map[string]any{
		"id": s.WAMID, "status": "sent", "timestamp": strconv.FormatInt(s.At.Unix(), 10),
		"recipient_id": s.To, "biz_opaque_callback_data": s.CallbackData,
	}
	if strings.Contains(s.Text, chaosFailsLater) {
		st["status"] = "failed"
		st["errors"] = []any{map[string]any{"code": 131026, "title": "Message undeliverable"}}
	}
	body := chaosWebhookBody(s.PhoneNumberID, map[string]any{"statuses": []any{st}})
	retries := 0
	began := time.Now()
	defer func() {
		m.mu.Lock()
		m.statuses.retries += retries
		m.inFlight--
		m.mu.Unlock()
	}()
	for {
		status, answer, err := m.api.postWebhook(ctx, slug, body)
		switch {
		case err == nil && status == http.StatusOK:
			m.r.latency.add(true, began)
			m.mu.Lock()
			m.statuses.sent++
			m.mu.Unlock()
			return
		case err == nil && status < 500:
			m.mu.Lock()
			m.statuses.refused = append(m.statuses.refused, fmt.Sprintf("status of step %s: %d %.200s", s.CallbackData, status, answer))
			m.mu.Unlock()
			return
		}
		retries++
		select {
		case <-ctx.Done():
			m.mu.Lock()
			m.statuses.unanswered++
			m.mu.Unlock()
			return
		case <-time.After(time.Duration(100+rand.IntN(400)) * time.Millisecond):
		}
	}
}

// pending says how many delivered sends have not been reported yet.
func (m *chaosMeta) pending() int {
	n := len(m.r.provider.Sends())
	m.mu.Lock()
	defer m.mu.Unlock()
	return n - m.next + m.inFlight
}

func (m *chaosMeta) record() chaosMetaRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.statuses
	out.taken = m.next
	out.refused = append([]string(nil), m.statuses.refused...)
	return out
}
