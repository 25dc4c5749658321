package chaos

import "context"

// stresser is a source of load, as in etcd's functional tester: it offers
// requests until loadCtx ends, lets what is in flight be answered until
// answerCtx ends, and records what it was told for the checker.
type stresser interface {
	// Stress offers load until loadCtx ends; offers in flight then go on
	// until answered or answerCtx ends.
	Stress(loadCtx, answerCtx context.Context)
	// Counts says how much it offered, by what.
	Counts() map[string]int
}

var (
	_ stresser = (*chaosLoad)(nil)
	_ stresser = (*chaosProber)(nil)
)
