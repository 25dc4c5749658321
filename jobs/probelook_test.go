package jobs

import (
	"testing"
	"time"
)

// A conversation told "not your probe" looks again when the probe is free
// (its prober may have died), never spinning on a probe about to be
// taken and never later than the cap; it once waited at least the cap,
// so a dead prober held every conversation of its tenant a minute.
func TestProbeLook(t *testing.T) {
	t.Parallel()
	d := func(x time.Duration) *time.Duration { return &x }
	for _, tc := range []struct {
		name string
		wait *time.Duration
		want time.Duration
	}{
		{"the probe free in 12 s (a prober's hold)", d(12 * time.Second), 12 * time.Second},
		{"the probe free at once: a second, no spin", d(0), time.Second},
		{"the probe free in 5 minutes (a long handler timeout): the cap", d(5 * time.Minute), time.Minute},
		{"no answer: the cap", nil, time.Minute},
	} {
		if got := probeLook(tc.wait, time.Minute); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
