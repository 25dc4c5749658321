package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be a CPU hog, as ordo-bench is one with
// cpuHogArg first.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == cpuHogArg {
		cpuHog()
	}
	if len(os.Args) > 1 && os.Args[1] == instrumentChildArg {
		instrumentChild()
	}
	os.Exit(m.Run())
}

// TestCPUHogsSpinAndStop: --cpu-hog's processes burn a core each while the
// run goes on, and are gone once stopped.
func TestCPUHogsSpinAndStop(t *testing.T) {
	stop, err := startCPUHogs(1)
	if err != nil {
		t.Fatal(err)
	}
	procs, _ := os.ReadDir("/proc")
	var pid string
	for _, p := range procs {
		if cmd, err := os.ReadFile("/proc/" + p.Name() + "/cmdline"); err == nil && strings.Contains(string(cmd), cpuHogArg) &&
			strings.Contains(statField(p.Name(), 3), strconv.Itoa(os.Getpid())) {
			pid = p.Name()
		}
	}
	if pid == "" {
		stop()
		t.Fatal("no hog process found among this test's children")
	}
	time.Sleep(time.Second)
	ticks, _ := strconv.Atoi(statField(pid, 13)) // utime, in clock ticks (100/s)
	stop()
	if ticks == 0 { // how much depends on the machine's load: only that it spun
		t.Errorf("the hog used no user CPU in a second; want it spinning")
	}
	if _, err := os.Stat("/proc/" + pid); err == nil {
		t.Errorf("hog %s still running after stop", pid)
	}
}

// instrumentChildArg makes the test binary raise itself as the bench
// does under --cpu-hog, start a child the way startChild does, and print
// both niceness values.
const instrumentChildArg = "--instrument-child"

func instrumentChild() {
	if err := raiseInstrument(-5); err != nil {
		fmt.Println("error:", err)
		os.Exit(0)
	}
	argv := niceArgv(-5, []string{"cat", "/proc/self/stat"})
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(0)
	}
	f := strings.Fields(string(out)[strings.LastIndexByte(string(out), ')')+1:])
	fmt.Printf("self=%s child=%s\n", statField("self", 18), f[16])
	os.Exit(0)
}

// TestInstrumentAboveTheHogsAndSystemsBack: with --cpu-hog the bench
// process (load generator, fake Cloud API) runs below nice 0, and the
// systems it starts run back at 0, as the hogs do.
func TestInstrumentAboveTheHogsAndSystemsBack(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("raising a process's priority needs root")
	}
	out, err := exec.Command(os.Args[0], instrumentChildArg).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "self=-5 child=0" {
		t.Errorf("niceness: %s; want self=-5 child=0", got)
	}
}

// statField is field i (0-based, after the command's name) of
// /proc/pid/stat: 3 is the parent's pid, 13 utime.
func statField(pid string, i int) string {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	if j := strings.LastIndexByte(s, ')'); j >= 0 {
		s = s[j+1:]
	}
	f := strings.Fields(s)
	if i-2 < 0 || i-2 >= len(f) {
		return ""
	}
	return f[i-2]
}

// TestTxPerMsgReported: the transactions per message are in the JSON line
// and the table.
func TestTxPerMsgReported(t *testing.T) {
	t.Parallel()
	r := benchResult{Scenario: "latency", System: "ordo", Messages: 10, TxPerMsg: 7.71}
	line, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(line), `"tx_per_msg":7.71`) {
		t.Errorf("JSON line %s has no tx_per_msg", line)
	}
	var out bytes.Buffer
	printBenchTable(&out, []benchResult{r})
	if !strings.Contains(out.String(), "tx/msg") || !strings.Contains(out.String(), "7.71") {
		t.Errorf("table has no tx/msg column:\n%s", out.String())
	}
}
