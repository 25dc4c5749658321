package chaos

import (
	"sync"
	"time"
)

// latencyLog records how long each real client waited for its answer: a
// REST offer or a signed webhook delivery, from its first try to the answer
// that ended it (retries after errors and 5xx included: that is the wait a
// client sees). The hostile flood reads the ones that started in its window.
type latencyLog struct {
	mu      sync.Mutex
	samples []latencySample
}

type latencySample struct {
	webhook bool
	at      time.Time
	took    time.Duration
}

func (l *latencyLog) add(webhook bool, at time.Time) {
	took := time.Since(at)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.samples = append(l.samples, latencySample{webhook: webhook, at: at, took: took})
}

// during returns the waits of the requests that started in [from, to], REST
// and webhooks apart.
func (l *latencyLog) during(from, to time.Time) (rest, webhook []time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.samples {
		if s.at.Before(from) || s.at.After(to) {
			continue
		}
		if s.webhook {
			webhook = append(webhook, s.took)
		} else {
			rest = append(rest, s.took)
		}
	}
	return rest, webhook
}
