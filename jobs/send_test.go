package jobs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// Every documented Cloud API failure leads to the action the channel
// promises: the codes go through whatsapp.Classify and sendActions, the two
// tables that decide it.
func TestSendFailureActions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		http   int
		code   int
		action action
	}{
		{"throughput 130429", 400, 130429, actThrottle},
		{"app limit 4", 400, 4, actThrottle},
		{"account limit 80007", 400, 80007, actThrottle},
		{"http 429 without code", 429, whatsapp.NoCode, actThrottle},
		{"pair rate 131056", 400, 131056, actPairRate},
		{"http 500", 500, whatsapp.NoCode, actAmbiguous},
		{"http 503", 503, whatsapp.NoCode, actAmbiguous},
		{"something went wrong 131000", 500, 131000, actAmbiguous},
		{"service unavailable 131016", 503, 131016, actAmbiguous},
		{"undeliverable 131026", 400, 131026, actDeadLetter},
		{"re-engagement 131047", 400, 131047, actDeadLetter},
		{"invalid parameter 100", 400, 100, actDeadLetter},
		{"missing parameter 131008", 400, 131008, actDeadLetter},
		{"bad parameter value 131009", 400, 131009, actDeadLetter},
		{"template 132000", 400, 132000, actDeadLetter},
		{"template paused 132015", 400, 132015, actDeadLetter},
		{"other 4xx", 404, whatsapp.NoCode, actDeadLetter},
		{"token expired 190", 401, 190, actPause},
		{"auth exception 0", 401, 0, actPause},
		{"permission 10", 403, 10, actPause},
		{"permission 200", 403, 200, actPause},
		{"permission 299", 403, 299, actPause},
		{"policy block 368", 403, 368, actPause},
		{"account locked 131031", 403, 131031, actPause},
	}
	for _, c := range cases {
		se := &whatsapp.SendError{Class: whatsapp.Classify(c.http, c.code), HTTPStatus: c.http, Code: c.code}
		if got := classifySend(se); got.action != c.action {
			t.Errorf("%s: action %d, want %d", c.name, got.action, c.action)
		}
	}
	// Transport failures: before the request was written it is safe to
	// retry; after, the message may have gone out.
	if f := classifySend(&whatsapp.SendError{Class: whatsapp.Retry, Code: whatsapp.NoCode}); f.action != actRetry {
		t.Errorf("dial failure: action %d, want retry", f.action)
	}
	if f := classifySend(errors.New("something else")); f.action != actAmbiguous {
		t.Errorf("an error that is not a SendError: action %d, want ambiguous", f.action)
	}
	for class := range whatsapp.Paused + 1 {
		if _, ok := sendActions[class]; class >= whatsapp.Retry && !ok {
			t.Errorf("class %s has no action", class)
		}
	}
}

// The 131056 schedule is Meta's 4^X seconds with X from 0, capped at an hour.
func TestPairRateDelay(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]time.Duration{
		1: time.Second, 2: 4 * time.Second, 3: 16 * time.Second, 4: 64 * time.Second, 6: 1024 * time.Second, 7: time.Hour, 40: time.Hour,
	} {
		if got := pairRateDelay(n, time.Second); got != want {
			t.Errorf("pairRateDelay(%d) = %s, want %s", n, got, want)
		}
	}
}

// The schedule handed to the failure's record is pairRateDelay for each run
// of errors up to the cap, whose entry then stands for every longer run.
func TestPairRateSchedule(t *testing.T) {
	t.Parallel()
	for _, unit := range []time.Duration{50 * time.Millisecond, time.Second, time.Hour, 2 * time.Hour} {
		s := pairRateSchedule(unit)
		for n := 1; n <= 40; n++ {
			if got, want := s[min(n, len(s))-1], pairRateDelay(n, unit); got != want {
				t.Errorf("unit %s, %d errors: schedule says %s, pairRateDelay %s", unit, n, got, want)
			}
		}
	}
}

// A sleep ends early when its context does.
func TestSleepHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := sleep(ctx, time.Minute); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("sleep = %v after %s", err, time.Since(start))
	}
}
