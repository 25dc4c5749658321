package fair

import (
	"slices"
	"testing"
)

func TestIdle(t *testing.T) {
	t.Parallel()
	i := &Idle[string]{Runners: 2}
	kept := func() (n int) { // takes every wake-up kept
		for i.Kept() {
			n++
		}
		return n
	}
	if _, ok := i.Wake(WakeWaiting); ok || i.Kept() {
		t.Fatal("WakeWaiting with no runner waiting woke one, or was kept")
	}
	for range 3 {
		i.Wake(WakeOne)
	}
	if n := kept(); n != 2 {
		t.Fatalf("%d wake-ups kept; want one for each of the 2 runners, no more", n)
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
	if got, n := i.All(), kept(); !slices.Equal(got, []string{"d"}) || n != 2 {
		t.Fatalf("All woke %v and kept %d wake-ups; want d, and one kept for each runner", got, n)
	}
}
