package chaos

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The flood generator's CPU budget holds for every thread of its process,
// those the Go runtime starts later included: at nice 19, each thread's
// nice value is 19; in a CPU quota (as root on cgroup v1), each thread is
// in the quota's cgroup, which is removed when the generator ends. Either
// way the generator floods and reports its counts.
func TestFloodProcessBudget(t *testing.T) {
	t.Parallel()
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		posts.Add(1)
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	spec := floodSpec{URL: srv.URL, Slugs: []string{"a", "b", "nobody-2", "c"}, BodyBytes: 1 << 20, Source: HostileSourceAddr, For: time.Minute}
	for _, cores := range []float64{-1, 0.3} {
		p, err := startFlood(spec, cores)
		if err != nil {
			t.Fatalf("cores %g: %v", cores, err)
		}
		pid := p.cmd.Process.Pid
		// Once the generator floods, its threads are started; look at each.
		from := posts.Load()
		waitFor(t, "the generator's requests", func() bool { return posts.Load() >= from+20 })
		for _, task := range taskDirs(pid) {
			if p.cgroup == "" {
				if nice := statField(t, filepath.Join(task, "stat"), 19); nice != "19" {
					t.Errorf("cores %g (%s): thread %s at nice %s, want 19", cores, p.budget, filepath.Base(task), nice)
				}
				continue
			}
			b, _ := os.ReadFile(filepath.Join(task, "cgroup"))
			if want := strings.TrimPrefix(p.cgroup, cgroupCPURoot); !strings.Contains(string(b), ":cpu:"+want+"\n") && !strings.Contains(string(b), ",cpu:"+want+"\n") && !strings.Contains(string(b), "cpu,cpuacct:"+want+"\n") {
				t.Errorf("cores %g: thread %s not in %s:\n%s", cores, filepath.Base(task), p.cgroup, b)
			}
		}
		res, use, err := p.stop()
		if err != nil || res.Sent == 0 || res.Outcomes["429"] == 0 || use.CPU <= 0 {
			t.Errorf("cores %g (%s): %+v, %+v, %v", cores, p.budget, res, use, err)
		}
		if most := time.Duration(cores*float64(use.Wall)) + 2*cfsPeriod; p.cgroup != "" && use.CPU > most {
			t.Errorf("cores %g: %s of CPU in %s (%s at most)", cores, use.CPU, use.Wall, most)
		}
		if p.cgroup != "" {
			if _, err := os.Stat(p.cgroup); !os.IsNotExist(err) {
				t.Errorf("cgroup %s left behind: %v", p.cgroup, err)
			}
		}
		t.Logf("cores %g (%s): %d requests in %s, %s of CPU in %s", cores, p.budget, res.Sent, res.Elapsed.Round(time.Millisecond), use.CPU, use.Wall.Round(time.Millisecond))
	}
}

func taskDirs(pid int) []string {
	d, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*")
	return d
}

// statField is field n (1-based, as proc(5) numbers them) of a stat file.
func statField(t *testing.T, path string, n int) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:])) // from field 3 on
	if i < 0 || len(f) < n-2 {
		t.Fatalf("%s: %q", path, b)
	}
	return f[n-3]
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within a minute", what)
		}
	}
}
