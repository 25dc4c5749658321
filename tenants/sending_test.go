package tenants_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ordo-dev/ordo/tenants"
)

// Pacing settings are validated and stored; a paused tenant shows its pause
// and reason, and ResumeSending lifts it once.
func TestSendingSettingsAndResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	createTenant(t, b, "acme")

	got, err := b.store.Update(ctx, "acme", tenants.UpdateParams{SendRate: ptr(250), PairGapMS: ptr(6000)})
	if err != nil || got.SendRate != 250 || got.PairGapMS != 6000 {
		t.Fatalf("update pacing = %+v, %v; want send_rate 250, pair_gap_ms 6000", got, err)
	}
	for _, bad := range []struct {
		p     tenants.UpdateParams
		field string
	}{
		{tenants.UpdateParams{SendRate: ptr(-1)}, "send_rate"},
		{tenants.UpdateParams{SendRate: ptr(100001)}, "send_rate"},
		{tenants.UpdateParams{PairGapMS: ptr(-5)}, "pair_gap"},
	} {
		_, err := b.store.Update(ctx, "acme", bad.p)
		assertInvalid(t, err, bad.field)
	}

	if resumed, err := b.store.ResumeSending(ctx, "acme"); err != nil || resumed {
		t.Fatalf("resume of an unpaused tenant = %t, %v; want false", resumed, err)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE ordo.tenants SET sending_paused_at = now(), sending_paused_reason = 'code 190' WHERE slug = 'acme'`); err != nil {
		t.Fatal(err)
	}
	paused, err := b.store.BySlug(ctx, "acme")
	if err != nil || paused.SendingPausedAt == nil || paused.SendingPausedReason != "code 190" {
		t.Fatalf("paused tenant = %+v, %v", paused, err)
	}
	if resumed, err := b.store.ResumeSending(ctx, "acme"); err != nil || !resumed {
		t.Fatalf("resume = %t, %v; want true", resumed, err)
	}
	after, _ := b.store.BySlug(ctx, "acme")
	if after.SendingPausedAt != nil || after.SendingPausedReason != "" {
		t.Fatalf("after resume = %+v; want no pause", after)
	}
	if _, err := b.store.ResumeSending(ctx, "nope"); !errors.Is(err, tenants.ErrNotFound) {
		t.Fatalf("resume of an unknown tenant: %v, want ErrNotFound", err)
	}
}
