package chaos

import (
	"strings"
	"testing"
	"time"
)

// TestUpgradePlannedAndJudged: an upgrade is planned once, within the
// first two thirds of the load and clear of the Cloud API's outage (for
// many seeds), only when the run has the build before; the
// check fails when its migrate failed, when it did not finish, and when
// the build before sent nothing on the new schema (it did not run there).
func TestUpgradePlannedAndJudged(t *testing.T) {
	t.Parallel()
	cfg := Config{Duration: 3 * time.Minute, Seed: 7}.withDefaults()
	if n := newFaultPlan(cfg).kinds()[faultUpgrade]; n != 0 {
		t.Fatalf("%d upgrades planned without the build before, want none", n)
	}
	cfg.Previous = []string{"ordo-previous"}
	var at time.Duration
	for _, f := range newFaultPlan(cfg).faults {
		if f.Kind() == faultUpgrade {
			if at != 0 {
				t.Fatal("two upgrades planned")
			}
			at = f.slot().at
		}
	}
	if at == 0 || at > cfg.Duration*2/3 {
		t.Fatalf("upgrade planned at %s; want one within the first two thirds of %s", at, cfg.Duration)
	}

	for seed := range uint64(50) {
		cfg.Seed = seed + 1
		var up, cloud slot
		for _, f := range newFaultPlan(cfg).faults {
			switch f.Kind() {
			case faultUpgrade:
				up = f.slot()
			case faultCloudAPIOutage:
				cloud = f.slot()
			}
		}
		if cloud.pause > 0 && up.at+upgradeSkew > cloud.at && up.at < cloud.at+cloud.pause {
			t.Errorf("seed %d: the upgrade's skew at %s overlaps the Cloud API outage %s–%s", cfg.Seed, up.at, cloud.at, cloud.at+cloud.pause)
		}
	}

	t0 := time.Now()
	skew := [2]time.Time{t0, t0.Add(upgradeSkew)}
	// The ledger as chaosJudge hands it over: locked (reading it through
	// its own locking methods hung a run).
	ledger := &chaosLedger{acks: []chaosAck{{at: t0.Add(time.Second)}, {at: t0.Add(time.Hour)}}}
	ledger.mu.Lock()
	defer ledger.mu.Unlock()
	during := []chaosSend{{At: t0.Add(time.Second)}}
	after := []chaosSend{{At: t0.Add(upgradeSkew + time.Second)}}
	for _, tc := range []struct {
		name string
		in   chaosInput
		fail string // "" passes
	}{
		{"upgraded, the build before sending meanwhile", chaosInput{upgraded: true, upgradeSkew: skew, sends: during}, ""},
		{"migrate failed", chaosInput{upgradeFailed: "exit status 1", upgradeSkew: skew, sends: during}, "migrate up with the new build"},
		{"not finished", chaosInput{upgradeSkew: skew, sends: during}, "did not finish"},
		{"nothing sent on the new schema", chaosInput{upgraded: true, upgradeSkew: skew, sends: after}, "sent nothing"},
	} {
		tc.in.planned = map[string]int{faultUpgrade: 1}
		tc.in.ledger = ledger
		rep := &Report{}
		judgeUpgrade(rep, tc.in)
		if len(rep.checks) != 1 {
			t.Fatalf("%s: %d checks, want 1", tc.name, len(rep.checks))
		}
		c := rep.checks[0]
		if tc.fail == "" && !strings.Contains(c.summary, "accepted 1") {
			t.Errorf("%s: summary %q; want the one acceptance in the skew counted", tc.name, c.summary)
		}
		if c.ok != (tc.fail == "") || tc.fail != "" && !strings.Contains(strings.Join(c.details, " "), tc.fail) {
			t.Errorf("%s: ok %t, details %q; want failing with %q", tc.name, c.ok, c.details, tc.fail)
		}
	}
	rep := &Report{}
	judgeUpgrade(rep, chaosInput{})
	if len(rep.checks) != 0 {
		t.Errorf("a run without an upgrade got the upgrade's check")
	}
}
