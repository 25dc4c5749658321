package chaos

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
)

// faultCloudAPIOutage is the Cloud API away for every number: the fake
// provider answers every send 503 (code 131016, "service unavailable")
// for CloudAPIOutageDefault. ordo must treat it as a state of each
// tenant's number (contract: "the same for the Cloud API"; jobs/number.go):
// its conversations wait, one probe send at a time looks for the number,
// and the existing checks hold — nothing lost or reordered, no dead letter
// but the chosen ones, no duplicate beyond the counted ambiguous sends —
// with every message settled after it is back.
const faultCloudAPIOutage = "cloudapi_outage"

// CloudAPIOutageDefault is how long the Cloud API is away.
const CloudAPIOutageDefault = 60 * time.Second

// cloudAPIOutageKind takes the Cloud API away once, for
// Config.CloudAPIOutage, in a run long enough to have the load go on 30 s
// after it; kept 6 s from the other rare faults.
var cloudAPIOutageKind = faultKind{
	name: faultCloudAPIOutage,
	plan: func(p *planner) []fault {
		d := p.cfg.CloudAPIOutage
		if d <= 0 {
			return nil
		}
		earliest, latest := max(3*time.Second, p.cfg.Duration/10), p.cfg.Duration-d-30*time.Second
		if latest < earliest {
			return nil // no room in so short a run: the plan line leaves it out
		}
		return p.place(1, latest, func() time.Duration { return d }, func(s slot) fault {
			p.cloudAPIOutage = &s
			return &cloudAPIOutage{s: s}
		})
	},
	summary: func(n int) string {
		if n == 0 {
			return ""
		}
		return fmt.Sprintf("%d Cloud API outages", n)
	},
}

// cloudAPIOutage is one outage of the Cloud API. It runs beside the other
// faults, as the handler's does: Meta is away whatever ordo's processes
// are doing.
type cloudAPIOutage struct {
	s     slot
	began time.Time
}

func (f *cloudAPIOutage) Kind() string { return faultCloudAPIOutage }
func (f *cloudAPIOutage) Desc() string {
	return fmt.Sprintf("the Cloud API answers every send 503 (131016) for %s", f.s.pause)
}
func (f *cloudAPIOutage) slot() slot   { return f.s }
func (f *cloudAPIOutage) independent() {}

func (f *cloudAPIOutage) Inject(_ context.Context, r *run) bool {
	r.log.fault(faultCloudAPIOutage, "%s", f.Desc())
	f.began = time.Now()
	r.provider.setOutage(true)
	return true
}

func (f *cloudAPIOutage) Recover(_ context.Context, r *run) {
	n := r.provider.setOutage(false)
	r.log.printf("Cloud API back after %s: %d sends answered 503 meanwhile (the first failures, then ordo's probes)", f.s.pause, n)
	// Nothing is sent meanwhile, nor until the numbers' next probe (at
	// most jobs.NumberProbeMax later): a handler outage's verdict window
	// is lengthened by that, as by an exclusive fault (stoppedDelivery),
	// for a conversation's next inbound message waits for its replies.
	r.windowMu.Lock()
	r.exclusives = append(r.exclusives, exclusiveSpan{kind: faultCloudAPIOutage, from: f.began, to: time.Now().Add(jobs.NumberProbeMax)})
	r.windowMu.Unlock()
}

// setOutage starts or ends the provider's outage, and returns how many
// sends the outage answered.
func (p *chaosProvider) setOutage(on bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.outage = on
	if on {
		p.outageAnswers = 0
	}
	return p.outageAnswers
}

// outageAnswer is the provider's answer to a send during an outage; p.mu
// is held.
func (p *chaosProvider) outageAnswer() (whatsapptest.Response, bool) {
	if !p.outage {
		return whatsapptest.Response{}, false
	}
	p.outageAnswers++
	return whatsapptest.Response{Status: http.StatusServiceUnavailable, ErrorCode: 131016}, true
}
