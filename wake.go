package redlock

// Waiting for a lock without polling ([WithWait], [Client.WaitReleased]).
//
// On each master a lock key has a wait queue (waitKey: a sorted set in the
// key's hash slot) of Clients, not of goroutines: a Client queues once per
// key, with its queue token and its clock at queueing as the score, and
// keeps its own waiters in arrival order; only the first of them (the head)
// asks the masters. A release (releaseScript) pops the first Client queued
// and keeps the key for it, the key's value then being that Client's queue
// token, for a grace period, and publishes the token and key on the wake
// channel; the Client's head takes the key with waitScript. So a release
// wakes one Client, which sends one request; nobody can take the key in
// between (a try-once Obtain finds it held); and Clients take turns in the
// order they queued, each serving its own waiters in order.
//
// Rules this file keeps, each with the test that fails when it breaks:
//   - A waiter queues on a master (waitScript) only once this Client's
//     subscription to that master's wake channel is confirmed, so no
//     release it waits for can go unheard; before that it tries with the
//     plain acquire, which queues nothing (TestWaitWokenByRelease).
//   - A waiter never sleeps past the moment a quorum of the keys it was
//     refused by could have expired (their PTTL): a lost notification costs
//     at most that (TestWaitLostNotification).
//   - A subscription that breaks and is re-established wakes every waiter
//     of its master to ask again (TestWaitSubscriptionKilled).
//   - A release that keeps the key for this Client while none of its
//     waiters wants it is handed on at once (TestWaitHandsOnUnwanted).
//   - A release kept for another Client re-arms the waiters' timers to the
//     grace, so a Client that died queued costs the others one grace
//     (TestWaitDeadClientCostsOneGrace).
//   - Close ends every wait with ErrClosed and every subscription's
//     goroutine (TestWaitClose).

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// wakeChannel is the wake channel of a standalone or Sentinel master; a
// Redis Cluster master publishes on the queue key's own (sharded) channel.
const wakeChannel = "redlock:wake"

// tokenLen is the length of a token: 16 bytes in unpadded base64.
const tokenLen = 22

// subLinger is how long a subscription outlives its last waiter, so that
// a key waited for again and again is not subscribed anew each time.
const subLinger = 2 * time.Second

// defaultGrace is how long a release keeps the key for the first Client
// queued, unless WithNodeTimeout sets it (twice the node timeout).
const defaultGrace = 200 * time.Millisecond

// waitKey names the wait queue of a lock key, in its hash slot (like
// counterKey).
func waitKey(key string) string {
	if hasTag(key) || strings.IndexByte(key, '}') >= 0 {
		return key + ":wait"
	}
	return "{" + key + "}:wait"
}

// A waker is a Client's waiting machinery: its subscriptions and its
// waiters by key. It exists from the first wait to Close.
type waker struct {
	c     *Client
	token string // this Client's queue token
	watch string // its watcher entry, "~" + token

	mu     sync.Mutex
	keys   map[string]*keyWaiters // by full key
	subs   map[subID]*sub
	closed bool
	wg     sync.WaitGroup // the subscriptions' goroutines
}

// keyWaiters are this Client's waiters of one key.
type keyWaiters struct {
	queue    []*waiter // in arrival order; queue[0] is the head, who asks the masters
	watchers []*waiter // WaitReleased calls
}

// A waiter is one waiting Obtain (or WaitReleased). Its fields are
// guarded by waker.mu; sig tells it they changed.
type waiter struct {
	key string
	sig chan struct{} // buffered 1
	// Masters whose release kept the key for this Client (reserved), for
	// another Client (others), or announced a release to watchers
	// (released), since the flags were last cleared; retry: a
	// subscription of this waiter was (re)established.
	reserved, others, released uint64
	retry                      bool
}

func (x *waiter) signal() {
	select {
	case x.sig <- struct{}{}:
	default:
	}
}

// A subID names a subscription: a master and a channel.
type subID struct {
	i  int
	ch string
}

// A sub is one subscription to one master's wake channel, with the
// goroutine that reads it.
type sub struct {
	id     subID
	ps     *redis.PubSub
	ready  bool // the master confirmed it, and it has not broken since
	users  int  // waiters using it
	linger *time.Timer
	stop   chan struct{}
}

// wakerFor returns the Client's waker, made at the first wait; nil once
// the Client is closing.
func (c *Client) wakerFor() *waker {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil
	}
	if c.wake == nil {
		c.wake = &waker{c: c, token: newToken(), keys: map[string]*keyWaiters{}, subs: map[subID]*sub{}}
		c.wake.watch = "~" + c.wake.token
	}
	return c.wake
}

// channelOf returns master i's wake channel for the queue key qkey.
func (c *Client) channelOf(i int, qkey string) string {
	if c.shardedMask&bit(i) != 0 {
		return qkey
	}
	return wakeChannel
}

// join adds a waiter of full (a watcher with watch set) and takes a use of
// its subscriptions, starting those not running.
func (w *waker) join(full string, watch bool) *waiter {
	x := &waiter{key: full, sig: make(chan struct{}, 1)}
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.keys[full]
	if kw == nil {
		kw = &keyWaiters{}
		w.keys[full] = kw
	}
	if watch {
		kw.watchers = append(kw.watchers, x)
	} else {
		kw.queue = append(kw.queue, x)
	}
	qkey := waitKey(full)
	for i := range w.c.nodes {
		id := subID{i, w.c.channelOf(i, qkey)}
		s := w.subs[id]
		if s == nil {
			s = w.subscribe(id)
		}
		s.users++
		if s.linger != nil {
			s.linger.Stop()
			s.linger = nil
		}
	}
	return x
}

// leave removes x, gives the head's turn to the next waiter, and lets
// subscriptions without users linger, then end.
func (w *waker) leave(x *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.keys[x.key]
	if i := slices.Index(kw.queue, x); i >= 0 {
		kw.queue = slices.Delete(kw.queue, i, i+1)
		if i == 0 && len(kw.queue) > 0 {
			kw.queue[0].retry = true // the new head asks at once
			kw.queue[0].signal()
		}
	} else if i := slices.Index(kw.watchers, x); i >= 0 {
		kw.watchers = slices.Delete(kw.watchers, i, i+1)
	}
	if len(kw.queue) == 0 && len(kw.watchers) == 0 {
		delete(w.keys, x.key)
	}
	if w.closed {
		return
	}
	qkey := waitKey(x.key)
	for i := range w.c.nodes {
		id := subID{i, w.c.channelOf(i, qkey)}
		s := w.subs[id]
		if s.users--; s.users == 0 {
			s.linger = time.AfterFunc(subLinger, func() { w.unsubscribe(s) })
		}
	}
}

// isHead reports whether x is its key's head, and clears its flags when
// it is about to ask the masters.
func (w *waker) isHead(x *waiter) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.keys[x.key].queue[0] == x
}

// ready reports whether every master's subscription for full is
// confirmed, and clears x's flags: what happens from now on counts.
func (w *waker) ready(x *waiter) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	x.reserved, x.others, x.released, x.retry = 0, 0, 0, false
	qkey := waitKey(x.key)
	for i := range w.c.nodes {
		if s := w.subs[subID{i, w.c.channelOf(i, qkey)}]; s == nil || !s.ready {
			return false
		}
	}
	return true
}

// flags returns x's flags: how many masters reserved the key for this
// Client, whether one reserved it for another, how many announced a
// release, and whether to ask again.
func (w *waker) flags(x *waiter) (reserved int, others bool, released int, retry bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	reserved, others, released, retry = bits.OnesCount64(x.reserved), x.others != 0, bits.OnesCount64(x.released), x.retry
	x.others, x.retry = 0, false
	return
}

// subscribe starts the subscription id; w.mu is held.
func (w *waker) subscribe(id subID) *sub {
	rdb := w.c.nodes[id.i].rdb
	s := &sub{id: id, stop: make(chan struct{})}
	// No channel yet: the goroutine subscribes, so that a dial to a master
	// that is down holds nobody else.
	if w.c.shardedMask&bit(id.i) != 0 {
		s.ps = rdb.SSubscribe(context.Background())
	} else {
		s.ps = rdb.Subscribe(context.Background())
	}
	w.subs[id] = s
	w.wg.Add(1)
	go w.run(s)
	return s
}

// unsubscribe ends s if it is still unused after its linger.
func (w *waker) unsubscribe(s *sub) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s.users > 0 || w.closed || w.subs[s.id] != s {
		return
	}
	delete(w.subs, s.id)
	close(s.stop)
	_ = s.ps.Close() // ends a Receive in progress
}

// run subscribes s and reads its messages until it is stopped. go-redis
// reconnects a broken subscription at the next Receive and subscribes
// again; every confirmation wakes the waiters of the master to ask again,
// since a release may have gone unheard meanwhile.
func (w *waker) run(s *sub) {
	defer w.wg.Done()
	ctx := context.Background()
	backoff := time.NewTimer(0)
	<-backoff.C
	defer backoff.Stop()
	var err error
	if w.c.shardedMask&bit(s.id.i) != 0 {
		err = s.ps.SSubscribe(ctx, s.id.ch)
	} else {
		err = s.ps.Subscribe(ctx, s.id.ch)
	}
	for {
		if err == nil {
			var msg any
			msg, err = s.ps.Receive(ctx)
			switch m := msg.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
					w.confirmed(s, true)
				}
			case *redis.Message:
				w.message(s.id.i, m.Payload)
			}
		}
		select {
		case <-s.stop:
			return
		default:
		}
		if err != nil {
			w.confirmed(s, false)
			backoff.Reset(50 * time.Millisecond) // a master down: no busy loop
			select {
			case <-s.stop:
				return
			case <-backoff.C:
			}
			err = nil // the next Receive reconnects and subscribes again
		}
	}
}

// confirmed records that s is (or is no longer) confirmed, and on
// confirmation wakes the waiters of its master to ask again.
func (w *waker) confirmed(s *sub, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s.ready == ok {
		return
	}
	s.ready = ok
	if !ok {
		return
	}
	for key, kw := range w.keys {
		if w.c.channelOf(s.id.i, waitKey(key)) != s.id.ch {
			continue
		}
		if len(kw.queue) > 0 {
			kw.queue[0].retry = true
			kw.queue[0].signal()
		}
		for _, x := range kw.watchers {
			x.retry = true
			x.signal()
		}
	}
}

// message handles a wake message from master i: a release that kept a key
// for a Client (its queue token and the key), or one announced to
// watchers ("~" and the key).
func (w *waker) message(i int, p string) {
	w.mu.Lock()
	if key, ok := strings.CutPrefix(p, "~"); ok {
		if kw := w.keys[key]; kw != nil {
			for _, x := range kw.watchers {
				x.released |= bit(i)
				x.signal()
			}
		}
		w.mu.Unlock()
		return
	}
	if len(p) <= tokenLen {
		w.mu.Unlock()
		return
	}
	tok, key := p[:tokenLen], p[tokenLen:]
	kw := w.keys[key]
	switch {
	case tok == w.token && (kw == nil || len(kw.queue) == 0):
		w.mu.Unlock()
		w.handOn(i, key) // kept for us, and nobody here wants it
		return
	case kw == nil || len(kw.queue) == 0:
	case tok == w.token:
		kw.queue[0].reserved |= bit(i)
		kw.queue[0].signal()
	default:
		kw.queue[0].others |= bit(i)
		kw.queue[0].signal()
	}
	w.mu.Unlock()
}

// handOn releases a key master i kept for this Client, which has no
// waiter for it any more: the next Client queued gets it.
func (w *waker) handOn(i int, full string) {
	c := w.c
	o := c.newOp(opRelease, full, "", w.token)
	o.deadline = time.Now().Add(c.cfg.timeout(defaultGrace))
	o.vals = context.Background()
	c.send(i, &o, nil)
}

// stop ends every subscription and waits for their goroutines; Close
// calls it once no wait can begin.
func (w *waker) stop() {
	w.mu.Lock()
	w.closed = true
	for id, s := range w.subs {
		if s.linger != nil {
			s.linger.Stop()
		}
		close(s.stop)
		_ = s.ps.Close()
		delete(w.subs, id)
	}
	w.mu.Unlock()
	w.wg.Wait()
}

// grace is how long a release keeps a key for the first Client queued.
func (c *Client) grace() time.Duration {
	return time.Duration(c.graceArg.(int64)) * time.Millisecond
}

// newOp is newOp with the Client's wait-queue settings.
func (c *Client) newOp(kind opKind, full, ckey, token string) op {
	o := newOp(kind, full, ckey, token)
	o.grace, o.sharded = c.graceArg, c.shardedMask
	return o
}

// quorumFree returns how long until a quorum of masters could be free,
// from a failed attempt's answers: 0 for a master that granted or had no
// key, its PTTL for one held by another owner; ok is false when failures
// leave no quorum in sight (the masters did not say).
func (c *Client) quorumFree(rd *round) (time.Duration, bool) {
	var waits []time.Duration
	for i, n := range rd.nodes {
		switch {
		case n.Err == nil || n.Err == errAbsent:
			waits = append(waits, 0)
		case n.Err == ErrTaken && rd.vals[i] > 0:
			waits = append(waits, time.Duration(rd.vals[i])*time.Millisecond)
		case n.Err == ErrTaken && rd.vals[i] == -2: // gone since
			waits = append(waits, 0)
		}
	}
	if len(waits) < c.quorum {
		return 0, false
	}
	slices.Sort(waits)
	return waits[c.quorum-1], true
}

// obtainWait is obtainLoop for WithWait: after a failed attempt it sleeps
// until a release wakes it or a quorum of the keys that refused it could
// have expired, whichever comes first.
func (c *Client) obtainWait(ctx context.Context, key string, ttl time.Duration) (_ *Lock, n int, _ []NodeError, _ error) {
	w := c.wakerFor()
	if w == nil {
		return nil, 0, nil, c.closedObtain(ErrClosed)
	}
	full := c.cfg.keyPrefix + key
	x := w.join(full, false)
	defer w.leave(x)
	for !w.isHead(x) { // this Client's waiters of the key, in arrival order
		select {
		case <-x.sig:
		case <-ctx.Done():
			return nil, 0, nil, c.unanswered("obtain", nil, context.Cause(ctx), ErrNotObtained)
		case <-c.closing:
			return nil, 0, nil, c.closedObtain(ErrClosed)
		}
	}
	token := newToken()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	grace := c.grace()
	var last error
	for n = 1; ; n++ {
		queued := w.ready(x)
		lock, nodes, wait, err := c.try(ctx, key, ttl, token, queued)
		if err == nil {
			return lock, n, nodes, nil
		}
		if err := c.cutShort(ctx, err, last); err != nil {
			return nil, n, nil, err
		}
		last = err
		if !queued {
			// Not queued yet: ask again as soon as the subscriptions are
			// confirmed (a retry flag), or when the lock could be free.
			wait = min(wait, grace)
		}
		timer.Reset(wait + time.Millisecond)
	sleep:
		for {
			select {
			case <-ctx.Done():
				return nil, n, nil, wrapCause(err, context.Cause(ctx))
			case <-c.closing:
				return nil, n, nil, wrapCause(err, ErrClosed)
			case <-timer.C:
				break sleep
			case <-x.sig:
				reserved, others, _, retry := w.flags(x)
				if retry || reserved >= c.quorum {
					break sleep
				}
				if others || reserved > 0 {
					// Kept for another Client, or for us on too few
					// masters so far: if that Client does not take it, the
					// key is free after the grace.
					if !timer.Stop() {
						<-timer.C
					}
					timer.Reset(grace + time.Millisecond)
				}
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// WaitReleased waits until the current holder of key releases it, or its
// lock expires: the wait of a worker that lost the race for a piece of
// work (a cache entry to rebuild) and wants its result, not the lock. It
// returns nil at once when key is not held on a quorum of masters; when a
// release of key is announced by a quorum of masters (the same wake-up
// [WithWait] uses, without queueing for the lock); or when a quorum of the
// keys it saw could have expired and key is then found free. A key that
// expired and was taken again before that check keeps it waiting for the
// new holder. It returns an error when ctx ends (wrapping its cause), on
// [Client.Close] (matching [ErrClosed]), or when too few masters answer
// (matching [ErrUnavailable]).
func (c *Client) WaitReleased(ctx context.Context, key string) error {
	if ctx == nil {
		return invalid("nil context")
	}
	if key == "" {
		return invalid("empty key")
	}
	w := c.wakerFor()
	if w == nil {
		return ErrClosed
	}
	full := c.cfg.keyPrefix + key
	x := w.join(full, true)
	defer w.leave(x)
	timeout := c.cfg.timeout(maxDefaultNodeTimeout * 10)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		queued := w.ready(x)
		o := c.newOp(opWatch, full, "", "")
		o.qtoken = w.watch
		rd := c.fanout(ctx, o, time.Now().Add(timeout), timeout)
		held, answered := 0, 0
		for i, nd := range rd.nodes {
			switch nd.Err {
			case nil: // held: read as a refusal with its PTTL, for quorumFree
				held++
				answered++
				rd.nodes[i].Err = ErrTaken
			case errAbsent:
				answered++
			}
		}
		wait, _ := c.quorumFree(rd)
		var err error
		if answered < c.quorum {
			err = c.quorumError("wait", rd, ErrUnavailable)
		}
		rd.done()
		switch {
		case err != nil:
			return err
		case held < c.quorum:
			return nil
		}
		if !queued {
			wait = min(wait, c.grace())
		}
		timer.Reset(wait + time.Millisecond)
	sleep:
		for {
			select {
			case <-ctx.Done():
				return fmt.Errorf("redlock: waiting for %q to be released: %w", key, context.Cause(ctx))
			case <-c.closing:
				return fmt.Errorf("redlock: waiting for %q to be released: %w", key, ErrClosed)
			case <-timer.C:
				break sleep
			case <-x.sig:
				_, _, released, retry := w.flags(x)
				if released >= c.quorum {
					return nil
				}
				if retry {
					break sleep
				}
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}
