package chaos

// The run's network: every ordo process reaches Postgres, and every worker
// the fake Cloud API, through a TCP proxy of its own in this process. The
// partition and slowness faults act on these proxies. A proxy in process
// rather than network namespaces or firewall rules: it needs no root, no
// iproute2 and no kernel modules, works wherever the run works, cannot leave
// the machine's network changed after a crash of the run, and it records
// what each worker sent and when, which the lease check reads.
//
// A cut proxy behaves like a partition, not like a crash: it forwards
// nothing either way and holds every connection open; what either side
// sends meanwhile is read (and its time noted) but held. New connections
// are accepted and held unanswered. On healing, the held bytes go on (TCP's
// retransmission after a partition heals), late: a peer that gave up
// meanwhile, or that Postgres ended (its idle_session_timeout is the
// drain's lease), sees that then. A slowed proxy delays each chunk it
// forwards, in each direction.

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// chaosProxy forwards TCP connections from a loopback listener to one
// upstream address, and can cut or slow them.
type chaosProxy struct {
	name     string
	upstream string
	ln       net.Listener
	record   bool // keep the time of each chunk forwarded upstream

	mu sync.Mutex
	// cut counts the cuts not healed yet: two faults may cut one worker's
	// proxy at once, and the first to heal must not end the second's
	// partition, which the checker judges until its own heal.
	cut     int
	healed  chan struct{} // closed when the last cut heals
	slowMin time.Duration // per direction: a round trip is delayed twice
	slowMax time.Duration
	rng     *rand.Rand
	conns   map[net.Conn]struct{}
	closed  bool
	sent    []time.Time // with record: when each chunk was read from the client
}

// newChaosProxy listens on a free loopback port and forwards to upstream.
// With record, it keeps the time of each chunk a client sends (for the
// worker's Cloud API proxy: the sends of that worker, as the network saw
// them).
func newChaosProxy(name, upstream string, seed uint64, record bool) (*chaosProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &chaosProxy{name: name, upstream: upstream, ln: ln, record: record,
		healed: make(chan struct{}), rng: rand.New(rand.NewPCG(seed, 77)), conns: make(map[net.Conn]struct{})}
	close(p.healed)
	go p.serve()
	return p, nil
}

// Addr is the proxy's listening address, host:port.
func (p *chaosProxy) Addr() string { return p.ln.Addr().String() }

func (p *chaosProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		go p.handle(c)
	}
}

func (p *chaosProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *chaosProxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

// handle connects a client to the upstream once the proxy is not cut, and
// forwards both ways until either side ends. What the client sends is read
// at once, even while cut (and held): the time of each chunk is when the
// client sent it, not when a partition let it through.
func (p *chaosProxy) handle(client net.Conn) {
	defer p.untrack(client)
	defer client.Close()
	stop := make(chan struct{})
	defer close(stop)
	fromClient := p.read(client, p.record, stop)
	if !p.pass() {
		return
	}
	up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		return // the upstream is down (Postgres restarting): the client sees its connection end
	}
	if !p.track(up) {
		up.Close()
		return
	}
	defer p.untrack(up)
	defer up.Close()
	fromUp := p.read(up, false, stop)
	done := make(chan struct{}, 2)
	go func() { p.write(up, fromClient); done <- struct{}{} }()
	go func() { p.write(client, fromUp); done <- struct{}{} }()
	<-done // one side ended: end the other, as a proxy that is a host would
}

// read reads src chunk by chunk into the channel it returns, closed when
// src ends; it gives up when stop is closed.
func (p *chaosProxy) read(src net.Conn, record bool, stop <-chan struct{}) <-chan []byte {
	chunks := make(chan []byte, 256)
	go func() {
		defer close(chunks)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if record {
					p.noteUpstream()
				}
				select {
				case chunks <- append([]byte(nil), buf[:n]...):
				case <-stop:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return chunks
}

// write writes each chunk to dst, holding it while the proxy is cut and
// delaying it while slowed.
func (p *chaosProxy) write(dst net.Conn, chunks <-chan []byte) {
	for c := range chunks {
		if !p.pass() {
			return
		}
		if d := p.delay(); d > 0 {
			time.Sleep(d)
		}
		if _, err := dst.Write(c); err != nil {
			return
		}
	}
	// The end of a connection crosses no partition either: the other side
	// learns of it once the cut heals.
	p.pass()
}

// pass waits while the proxy is cut; false once it is closed.
func (p *chaosProxy) pass() bool {
	for {
		p.mu.Lock()
		closed, cut, healed := p.closed, p.cut, p.healed
		p.mu.Unlock()
		if closed {
			return false
		}
		if cut == 0 {
			return true
		}
		<-healed
	}
}

func (p *chaosProxy) delay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.slowMax <= 0 {
		return 0
	}
	if p.slowMax <= p.slowMin {
		return p.slowMin
	}
	return p.slowMin + time.Duration(p.rng.Int64N(int64(p.slowMax-p.slowMin)))
}

func (p *chaosProxy) noteUpstream() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent = append(p.sent, time.Now())
}

// Cut stops all traffic through the proxy, holding its connections, until
// as many Heals.
func (p *chaosProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut++; p.cut == 1 {
		p.healed = make(chan struct{})
	}
}

// Heal ends one Cut; the held traffic goes on once every cut healed.
func (p *chaosProxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut == 0 {
		return
	}
	if p.cut--; p.cut == 0 {
		close(p.healed)
	}
}

// Slow delays every chunk forwarded, each way, by a random time in
// [lo, hi); Slow(0, 0) ends it.
func (p *chaosProxy) Slow(lo, hi time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.slowMin, p.slowMax = lo, hi
}

// Sent returns when each chunk a client sent upstream was read (with
// record).
func (p *chaosProxy) Sent() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.sent...)
}

// Close stops the proxy and ends its connections.
func (p *chaosProxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if p.cut > 0 {
		p.cut = 0
		close(p.healed)
	}
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	err := p.ln.Close()
	for c := range conns {
		c.Close()
	}
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

var _ io.Closer = (*chaosProxy)(nil)
