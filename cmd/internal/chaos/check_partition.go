package chaos

import (
	"fmt"
	"time"
)

// judgePartitions holds each worker cut off from Postgres to its lease: once
// its lease is over (the partition's start plus the lease: a drain's lease
// runs from the last answer it heard, which is before the partition), its
// conversations are another worker's, and it must make no call to the
// Cloud API until the partition heals. Its sends are what its own proxy to
// the Cloud API read from it, so a call counts even if the provider never
// answered it.
func judgePartitions(rep *Report, in chaosInput) {
	var (
		late           []string
		cuts           int
		calls, afterIt int
		total          int // the cut-off workers' requests over the whole run: the record is not empty
	)
	for _, p := range in.partitions {
		if p.kind != faultWorkerDBCut {
			continue
		}
		cuts++
		lost := p.from.Add(in.lease)
		total += len(in.workerSends[p.worker])
		var n int
		var first time.Time
		for _, at := range in.workerSends[p.worker] {
			if at.After(lost) && at.Before(p.to) {
				if n == 0 {
					first = at
				}
				n++
			}
			if !at.Before(p.from) && at.Before(p.to) {
				calls++
			}
		}
		afterIt += n
		if n > 0 {
			late = append(late, fmt.Sprintf("%s, cut off from Postgres at %s for %s: %d requests to the Cloud API after its lease ended (%s), the first %s after it",
				p.worker, p.from.Format("15:04:05.000"), p.to.Sub(p.from).Round(time.Millisecond), n, lost.Format("15:04:05.000"), first.Sub(lost).Round(time.Millisecond)))
		}
	}
	if cuts == 0 {
		return
	}
	rep.add("no Cloud API call after a lease was lost", len(late) == 0,
		fmt.Sprintf("%d workers cut off from Postgres (%d requests to the Cloud API over the run): %d requests while cut off, %d after their lease (%s) was over",
			cuts, total, calls, afterIt, in.lease), late...)
}
