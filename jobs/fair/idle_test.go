package fair

import (
	"slices"
	"testing"
)

func TestIdle(t *testing.T) {
	t.Parallel()
	i := &Idle[string]{Runners: 2}
	if _, ok := i.Wake(WakeWaiting); ok || i.Kept() {
		t.Fatal("WakeWaiting with no runner waiting woke one, or was kept")
	}
	for range 3 {
		i.Wake(WakeOne)
	}
	if !i.Kept() || !i.Kept() || i.Kept() {
		t.Fatal("want a wake-up kept for each of the 2 runners, no more")
	}
	i.Wait("a")
	i.Wait("b")
	i.Wait("c")
	if r, ok := i.Wake(WakeWaiting); !ok || r != "a" {
		t.Fatalf("woke %q %v; want the runner that waited longest, a", r, ok)
	}
	if i.Leave("a") {
		t.Fatal("a woken runner was still on the list")
	}
	if !i.Leave("b") {
		t.Fatal("a runner whose wait timed out was not on the list")
	}
	if r, ok := i.Wake(WakeOne); !ok || r != "c" || i.Kept() {
		t.Fatalf("woke %q %v; want c, and nothing kept while one waited", r, ok)
	}
	if _, ok := i.Wake(WakeNone); ok {
		t.Fatal("WakeNone woke a runner")
	}
	i.Wait("d")
	if got := i.All(); !slices.Equal(got, []string{"d"}) || !i.Kept() || !i.Kept() || i.Kept() {
		t.Fatalf("All woke %v; want d, and a wake-up kept for each runner", got)
	}
}
