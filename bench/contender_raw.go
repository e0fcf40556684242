package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"
	"time"
)

// rawContender is a floor, not a lock to use: the two commands of a
// Redlock cycle written by hand in RESP on one connection per master (a
// writer goroutine sends whatever was queued since its last write, another
// reads the replies in order and hands each to its caller), with nothing a
// production lock needs: no deadline, no reconnect, no ordering barrier, no
// script reload, no undo of a failed attempt on a dead connection, and no
// go-redis. Half duplex, the writer waits until the last write is answered,
// as a redlock lane does; full duplex, it does not. It shows how far the
// libraries are from the wire on this machine, and what duplex is worth.
type rawContender struct {
	half   bool // one batch in flight per connection, as redlock's lanes
	conns  []*rawConn
	ttl    string // milliseconds, as SET PX takes it
	ttlDur time.Duration
	quorum int
	drift  time.Duration
	sha    string
}

func (c *rawContender) Setup(t target) error {
	if len(t.Options) != len(t.Clients) {
		return errors.New("raw: needs each master's address (no cluster cells)")
	}
	ctx := context.Background()
	sha, err := t.Clients[0].ScriptLoad(ctx, releaseScript).Result()
	if err != nil {
		return err
	}
	for i, o := range t.Options {
		if i > 0 {
			if err := t.Clients[i].ScriptLoad(ctx, releaseScript).Err(); err != nil {
				return err
			}
		}
		rc, err := dialRaw(o.Network, o.Addr, o.Username, o.Password, c.half)
		if err != nil {
			return err
		}
		c.conns = append(c.conns, rc)
	}
	c.sha, c.ttlDur = sha, t.TTL
	c.ttl = strconv.FormatInt(t.TTL.Milliseconds(), 10)
	c.quorum = len(c.conns)/2 + 1
	c.drift = t.TTL/100 + 2*time.Millisecond
	return nil
}

func (c *rawContender) NewWorker() worker {
	return &rawWorker{c: c, done: make(chan rawReply, len(c.conns)), refused: make([]bool, len(c.conns))}
}

func (c *rawContender) Close() error {
	var errs []error
	for _, rc := range c.conns {
		errs = append(errs, rc.close())
	}
	c.conns = nil
	return errors.Join(errs...)
}

// A rawReply is one reply: an integer, a status (1), a nil bulk (0), or an error.
type rawReply struct {
	n   int64
	err error
}

// rawConn is one full-duplex connection: send appends a command to the
// write buffer and its reply channel to the queue of replies, in one
// critical section, so the replies come back in the queue's order.
type rawConn struct {
	nc   net.Conn
	half bool // write only once every reply of the last write was read

	mu      sync.Mutex
	cond    sync.Cond
	buf     []byte
	waiting []chan<- rawReply
	head    int
	queued  int // commands in buf, not written yet
	closed  bool
	err     error
	wg      sync.WaitGroup
}

func dialRaw(network, addr, user, pass string, half bool) (*rawConn, error) {
	if network == "" {
		network = "tcp"
	}
	nc, err := net.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	rc := &rawConn{nc: nc, half: half}
	rc.cond.L = &rc.mu
	rc.wg.Add(2)
	go rc.write()
	go rc.read()
	if pass != "" {
		args := []string{"AUTH", pass}
		if user != "" {
			args = []string{"AUTH", user, pass}
		}
		ch := make(chan rawReply, 1)
		rc.send(ch, args...)
		if r := <-ch; r.err != nil {
			rc.close()
			return nil, r.err
		}
	}
	return rc, nil
}

func (rc *rawConn) send(ch chan<- rawReply, args ...string) {
	rc.mu.Lock()
	if rc.closed {
		err := rc.err
		rc.mu.Unlock()
		ch <- rawReply{err: err}
		return
	}
	rc.buf = append(rc.buf, '*')
	rc.buf = strconv.AppendInt(rc.buf, int64(len(args)), 10)
	rc.buf = append(rc.buf, '\r', '\n')
	for _, a := range args {
		rc.buf = append(rc.buf, '$')
		rc.buf = strconv.AppendInt(rc.buf, int64(len(a)), 10)
		rc.buf = append(rc.buf, '\r', '\n')
		rc.buf = append(rc.buf, a...)
		rc.buf = append(rc.buf, '\r', '\n')
	}
	rc.waiting = append(rc.waiting, ch)
	rc.queued++
	rc.cond.Signal()
	rc.mu.Unlock()
}

func (rc *rawConn) write() {
	defer rc.wg.Done()
	var out []byte
	rc.mu.Lock()
	for {
		for (len(rc.buf) == 0 || rc.half && rc.head < len(rc.waiting)-rc.queued) && !rc.closed {
			rc.cond.Wait()
		}
		if rc.closed {
			rc.mu.Unlock()
			return
		}
		// One yield lets the callers woken by the last replies queue
		// their next commands first: fewer, fuller writes.
		rc.mu.Unlock()
		runtime.Gosched()
		rc.mu.Lock()
		out, rc.buf = rc.buf, out[:0]
		rc.queued = 0
		rc.mu.Unlock()
		if _, err := rc.nc.Write(out); err != nil {
			rc.fail(err)
			return
		}
		rc.mu.Lock()
	}
}

func (rc *rawConn) read() {
	defer rc.wg.Done()
	br := bufio.NewReaderSize(rc.nc, 64<<10)
	for {
		r, err := readRawReply(br)
		if err != nil {
			rc.fail(err)
			return
		}
		rc.mu.Lock()
		ch := rc.waiting[rc.head]
		rc.waiting[rc.head] = nil
		rc.head++
		if rc.head == len(rc.waiting) {
			rc.waiting, rc.head = rc.waiting[:0], 0
		}
		if rc.half && rc.head == len(rc.waiting)-rc.queued {
			rc.cond.Signal() // every written command answered: the writer may go
		}
		rc.mu.Unlock()
		ch <- r
	}
}

func readRawReply(br *bufio.Reader) (rawReply, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return rawReply{}, err
	}
	if len(line) < 3 {
		return rawReply{}, fmt.Errorf("raw: short reply %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+':
		return rawReply{n: 1}, nil
	case '-':
		return rawReply{err: errors.New(string(body))}, nil
	case ':':
		n, err := strconv.ParseInt(string(body), 10, 64)
		return rawReply{n: n}, err
	case '$':
		n, err := strconv.Atoi(string(body))
		if err != nil {
			return rawReply{}, err
		}
		if n < 0 {
			return rawReply{}, nil // a nil bulk: SET NX refused
		}
		if _, err := br.Discard(n + 2); err != nil {
			return rawReply{}, err
		}
		return rawReply{n: 1}, nil
	}
	return rawReply{}, fmt.Errorf("raw: unexpected reply %q", line)
}

// fail ends the connection: every queued and later caller hears err.
func (rc *rawConn) fail(err error) {
	rc.mu.Lock()
	if !rc.closed {
		rc.closed, rc.err = true, err
	}
	waiting := rc.waiting[rc.head:]
	rc.waiting, rc.head = nil, 0
	rc.cond.Broadcast()
	rc.mu.Unlock()
	for _, ch := range waiting {
		ch <- rawReply{err: err}
	}
	rc.nc.Close()
}

func (rc *rawConn) close() error {
	rc.fail(io.ErrClosedPipe)
	rc.wg.Wait()
	return nil
}

type rawWorker struct {
	c        *rawContender
	done     chan rawReply
	refused  []bool
	key, tok string
}

func (w *rawWorker) Lock(ctx context.Context, key string) (bool, error) {
	var b [16]byte
	rand.Read(b[:])
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	start := time.Now()
	for _, rc := range w.c.conns {
		rc.send(w.done, "SET", key, tok, "NX", "PX", w.c.ttl)
	}
	// Replies come back per connection in order, but not across masters:
	// which master refused is not known, so a failed attempt undoes
	// everywhere.
	granted, taken := 0, 0
	var errs []error
	for range w.c.conns {
		r := <-w.done
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case r.n == 1:
			granted++
		default:
			taken++
		}
	}
	if granted >= w.c.quorum && time.Since(start) < w.c.ttlDur-w.c.drift {
		w.key, w.tok = key, tok
		return true, nil
	}
	_, _ = w.release(key, tok)
	if refusedByOwners(taken, len(w.c.conns)) {
		return false, nil
	}
	return false, fmt.Errorf("raw: %d of %d granted, quorum %d: %w", granted, len(w.c.conns), w.c.quorum, errors.Join(errs...))
}

func (w *rawWorker) release(key, tok string) (int, error) {
	for _, rc := range w.c.conns {
		rc.send(w.done, "EVALSHA", w.c.sha, "1", key, tok)
	}
	deleted := 0
	var errs []error
	for range w.c.conns {
		r := <-w.done
		if r.err != nil {
			errs = append(errs, r.err)
		}
		deleted += int(r.n)
	}
	return deleted, errors.Join(errs...)
}

func (w *rawWorker) Unlock(ctx context.Context) error {
	deleted, err := w.release(w.key, w.tok)
	w.key, w.tok = "", ""
	if err != nil {
		return err
	}
	if deleted < w.c.quorum {
		return fmt.Errorf("raw: %w (%d deleted)", errNotConfirmed, deleted)
	}
	return nil
}
