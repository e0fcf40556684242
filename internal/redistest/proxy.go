package redistest

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A Proxy forwards TCP connections to a server and lets a test delay the
// bytes of the connections open now, one direction at a time, or cut the
// client's side of them while what the client sent still reaches the
// server: the timing faults of single requests (a request that arrives after
// its caller gave up; a connection replaced while its requests are still on
// the way). Connections opened later are not affected. Stdlib only, so the
// library's own tests can use it; the chaos suite has toxiproxy for more.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[*link]struct{}
	closed  bool
	wg      sync.WaitGroup
	pending atomic.Int64 // chunks read from one side, not yet written to the other nor dropped
	at      []byte       // SilenceAt's word, lower case; nil when unarmed
}

// A link is one proxied connection: client <-> proxy <-> server.
type link struct {
	client, server net.Conn
	up, down       *pump
}

// A pump copies one direction of a link, holding each chunk until its
// delay has passed; chunks keep their order.
type pump struct {
	mu     sync.Mutex
	delay  time.Duration
	silent bool // drop every chunk, and never close the other side
}

func (p *pump) hush() {
	p.mu.Lock()
	p.silent = true
	p.mu.Unlock()
}

func (p *pump) hushed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.silent
}

func (p *pump) setDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

func (p *pump) due() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Now().Add(p.delay)
}

// NewProxy listens on a free loopback port and forwards every connection to
// target. Close it when done.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		l := &link{client: c, server: s, up: &pump{}, down: &pump{}}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		p.conns[l] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.copy(l, l.server, l.client, l.up)
		go p.copy(l, l.client, l.server, l.down)
	}
}

// copy forwards src to dst through pm: a reader goroutine stamps each chunk
// with its due time, this one writes it then.
func (p *Proxy) copy(l *link, dst, src net.Conn, pm *pump) {
	defer p.wg.Done()
	type chunk struct {
		b   []byte
		due time.Time
	}
	ch := make(chan chunk, 1024)
	go func() {
		defer close(ch)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				p.pending.Add(1)
				ch <- chunk{b[:n], pm.due()}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		time.Sleep(time.Until(c.due))
		if pm.hushed() {
			p.pending.Add(-1)
			continue
		}
		if i := p.reached(pm == l.down, c.b); i >= 0 {
			// SilenceAt: the client hears the bytes before the word, and
			// nothing after, either way.
			l.up.hush()
			_, _ = dst.Write(c.b[:i])
			pm.hush()
			p.pending.Add(-1)
			continue
		}
		_, err := dst.Write(c.b)
		p.pending.Add(-1)
		if err != nil {
			break
		}
	}
	for range ch { // drain, so the reader can exit
		p.pending.Add(-1)
	}
	// The source is done: close the other side for writing, so the peer
	// sees EOF after everything that was sent; a silenced link tells the
	// peer nothing.
	if pm.hushed() {
		return // Close closes both sides
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	} else {
		dst.Close()
	}
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

// Pending returns how many chunks of bytes the proxy holds: read from one
// side of a connection and not yet written to the other (a delay) nor
// dropped (a silenced or closed connection). Zero once what was sent
// through it has been delivered: a straggling request has reached the
// server, or never will.
func (p *Proxy) Pending() int64 { return p.pending.Load() }

// DelayOpen delays by up (client to server) and down (server to client)
// every byte read from now on by the connections open now.
func (p *Proxy) DelayOpen(up, down time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.conns {
		l.up.setDelay(up)
		l.down.setDelay(down)
	}
}

// Silence makes the connections open now go dark, as a network path that
// drops every packet: no byte passes in either direction any more, and
// when the server closes its side (a restart), the client is not told.
// Their client sides stay open until Close. Connections opened later are
// not affected.
func (p *Proxy) Silence() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.conns {
		l.up.hush()
		l.down.hush()
	}
}

// SilenceAt arms the proxy: the next connection, open now or later, whose
// server sends word (ASCII, any case) goes dark where the word begins, as
// Silence: its client reads the bytes before the word, and nothing after
// in either direction, while the server has run the request it answered.
// An answer whose beginning the client reads and whose end never comes: a
// subscription's confirmation lost after the server ran the SUBSCRIBE, say.
// One connection only: the proxy is unarmed after it. The word must come
// within one read of the proxy's (a short reply's does).
func (p *Proxy) SilenceAt(word string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.at = bytes.ToLower([]byte(word))
}

// reached returns where SilenceAt's word begins in b, a chunk from a
// server when down, and unarms the proxy; -1 when it is not there.
func (p *Proxy) reached(down bool, b []byte) int {
	if !down {
		return -1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at == nil {
		return -1
	}
	i := bytes.Index(bytes.ToLower(b), p.at)
	if i >= 0 {
		p.at = nil
	}
	return i
}

// CutOpen resets the client's side of the connections open now (the client
// reads ECONNRESET or EOF), while the bytes they sent keep going to the
// server, after their delay, on the server's side, which stays open until
// they are delivered: a connection replaced mid-stream whose requests still
// arrive. It returns how many connections it cut.
func (p *Proxy) CutOpen() int {
	// Let the up pumps read what the clients have sent so far: a reset
	// throws away what the proxy's socket holds unread.
	time.Sleep(20 * time.Millisecond)
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.conns {
		if tc, ok := l.client.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST, not FIN
		}
		// Unblock the down pump's reader only when the server side ends;
		// the up pump has already read what the client sent, or reads EOF
		// now.
		l.client.Close()
	}
	return len(p.conns)
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	for l := range p.conns {
		l.client.Close()
		l.server.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) {
		err = nil
	}
	return err
}
