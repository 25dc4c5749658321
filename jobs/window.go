package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// The customer service window for a handler's replies (issue 26). REST and
// SQL messages are checked at ingest (ordo.enqueue_message, SQLSTATE
// ORW01); a reply is checked right before it is sent, against the
// conversation's latest inbound stamp (conversations.last_inbound_at,
// written by the webhook): a reply that is not a template, sent more than
// whatsapp.ServiceWindow after the user last wrote, is dead-lettered with
// the ingest's words instead of being refused by Meta (131047).

// lastInboundQuery reads conversation $1's latest inbound stamp (no lock:
// it only moves forward).
const lastInboundQuery = `SELECT last_inbound_at FROM ordo.conversations WHERE id = $1`

// checkWindow refuses a reply (a send step after a handle step: idx > 0)
// outside the service window. Outbound messages (idx 0) were checked at
// ingest, and the batched drain sends only those.
func (r *run) checkWindow(ctx context.Context, st *step) error {
	if st.idx == 0 || r.s == nil || whatsapp.IsTemplate(st.request) {
		return nil
	}
	var last *time.Time
	r.s.touch()
	if err := r.s.conn.QueryRow(ctx, lastInboundQuery, r.s.conv).Scan(&last); err != nil {
		return r.s.fail(fmt.Errorf("read service window: %w", err))
	}
	if last == nil {
		return nil // no inbound seen through the webhook: Meta decides
	}
	if end := last.Add(whatsapp.ServiceWindow); time.Now().After(end) {
		return &failure{msg: "not sent, " + whatsapp.OutsideWindow(end), action: actDeadLetter, class: whatsapp.Permanent.String()}
	}
	return nil
}
