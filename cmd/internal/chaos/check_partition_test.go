package chaos

import (
	"strings"
	"testing"
	"time"
)

// TestJudgePartitions: a worker cut off from Postgres may finish a send in
// flight within its lease, and the check fails on a call after it.
func TestJudgePartitions(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC)
	lease := 4 * time.Second
	cut := partitionRecord{kind: faultWorkerDBCut, worker: "worker-2", from: from, to: from.Add(12 * time.Second)}
	judge := func(sends map[string][]time.Time, parts ...partitionRecord) chaosCheck {
		rep := &Report{}
		judgePartitions(rep, chaosInput{partitions: parts, workerSends: sends, lease: lease})
		if len(rep.checks) != 1 {
			t.Fatalf("%d checks, want 1", len(rep.checks))
		}
		return rep.checks[0]
	}
	for _, tc := range []struct {
		name  string
		sends map[string][]time.Time
		ok    bool
	}{
		{"in flight within the lease", map[string][]time.Time{"worker-2": {from.Add(-time.Second), from.Add(time.Second), from.Add(lease - time.Millisecond)}}, true},
		{"after the partition healed", map[string][]time.Time{"worker-2": {from.Add(13 * time.Second)}}, true},
		{"another worker, meanwhile", map[string][]time.Time{"worker-1": {from.Add(5 * time.Second)}}, true},
		{"after the lease, cut off", map[string][]time.Time{"worker-2": {from.Add(time.Second), from.Add(lease + 100*time.Millisecond)}}, false},
	} {
		c := judge(tc.sends, cut)
		if c.ok != tc.ok {
			t.Errorf("%s: ok %v, want %v (%s %v)", tc.name, c.ok, tc.ok, c.summary, c.details)
		}
		if !tc.ok && (len(c.details) != 1 || !strings.Contains(c.details[0], "worker-2")) {
			t.Errorf("%s: details %q do not name the worker", tc.name, c.details)
		}
	}
	// A partition from the Cloud API is not held to it: the worker still
	// holds its lease and retries its sends once healed.
	rep := &Report{}
	judgePartitions(rep, chaosInput{partitions: []partitionRecord{{kind: faultWorkerAPICut, worker: "worker-2", from: from, to: from.Add(time.Minute)}},
		workerSends: map[string][]time.Time{"worker-2": {from.Add(30 * time.Second)}}, lease: lease})
	if len(rep.checks) != 0 {
		t.Errorf("a Cloud API partition alone made checks %+v", rep.checks)
	}
}
