package main

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A delayLine delivers chunks of bytes a fixed time after they were read: a
// network's one-way latency on one machine. toxiproxy's latency toxic counts
// whole milliseconds, and a Go timer in an idle process fires a millisecond
// late at best, so one goroutine holding its own OS thread sleeps in
// nanosleep until each chunk is due and writes it (see preciseSleep). With
// one delay for every chunk, the order chunks are pushed in is the order
// they fall due, so the line is a FIFO. The sleep still overshoots by the
// kernel's wake-up time: the report gives the round trip measured by PING.
type delayLine struct {
	delay  time.Duration
	writes atomic.Uint64 // chunks delivered

	mu   sync.Mutex
	q    []chunk
	head int
	wake chan struct{} // a push into an empty line
	stop chan struct{}
	done chan struct{}
}

type chunk struct {
	due      time.Time
	src, dst net.Conn
	buf      *[]byte
	n        int
}

var chunkBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func newDelayLine(delay time.Duration) *delayLine {
	l := &delayLine{delay: delay, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

func (l *delayLine) push(c chunk) {
	l.mu.Lock()
	c.due = time.Now().Add(l.delay)
	empty := l.head == len(l.q)
	l.q = append(l.q, c)
	l.mu.Unlock()
	if empty {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

func (l *delayLine) pop() (chunk, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.head == len(l.q) {
		l.q, l.head = l.q[:0], 0
		return chunk{}, false
	}
	c := l.q[l.head]
	l.q[l.head] = chunk{}
	l.head++
	if l.head >= 1024 && 2*l.head >= len(l.q) {
		l.q, l.head = l.q[:copy(l.q, l.q[l.head:])], 0
	}
	return c, true
}

func (l *delayLine) run() {
	defer close(l.done)
	lockThreadForSleep()
	for {
		c, ok := l.pop()
		if !ok {
			select {
			case <-l.wake:
				continue
			case <-l.stop:
				return
			}
		}
		preciseSleep(time.Until(c.due))
		if _, err := c.dst.Write((*c.buf)[:c.n]); err != nil {
			c.src.Close()
			c.dst.Close()
		}
		l.writes.Add(1)
		chunkBufs.Put(c.buf)
	}
}

// Close stops the line; chunks not yet delivered are dropped.
func (l *delayLine) Close() {
	close(l.stop)
	<-l.done
}

// A delayProxy forwards TCP connections to one master through a delay line,
// both ways.
type delayProxy struct {
	ln       net.Listener
	upstream string
	line     *delayLine

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// newDelayProxy listens on a free loopback port in front of upstream.
func newDelayProxy(upstream string, line *delayLine) (*delayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{ln: ln, upstream: upstream, line: line, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is where clients connect.
func (p *delayProxy) Addr() string { return p.ln.Addr().String() }

func (p *delayProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.upstream)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, u) {
			return
		}
		p.wg.Go(func() { p.read(c, u) })
		p.wg.Go(func() { p.read(u, c) })
	}
}

func (p *delayProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

// read pushes what arrives on src into the line, bound for dst. When src
// fails or ends, both connections close.
func (p *delayProxy) read(src, dst net.Conn) {
	for {
		b := chunkBufs.Get().(*[]byte)
		n, err := src.Read(*b)
		if n > 0 {
			p.line.push(chunk{src: src, dst: dst, buf: b, n: n})
		} else {
			chunkBufs.Put(b)
		}
		if err != nil {
			break
		}
	}
	src.Close()
	dst.Close()
	p.mu.Lock()
	delete(p.conns, src)
	delete(p.conns, dst)
	p.mu.Unlock()
}

// Close stops listening and closes every connection.
func (p *delayProxy) Close() error {
	p.mu.Lock()
	p.closed = true
	err := p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}
