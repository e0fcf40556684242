package redlock

// A Client's waiters ([WithWait], [Client.WaitReleased]), by key, and what
// each has heard from the masters.
//
// A waiter that finds a key held marks it as waited for (wait.lua,
// watch.lua: the key's value gets "!" after the token); the release of a
// marked key publishes the key on the master's wake channel (release.lua),
// and every Client with a waiter of that key hears it (internal/wake keeps
// the subscriptions). An unmarked key, the case with nobody waiting, costs
// its release nothing more: the mark lives in the value the release reads
// anyway. Nothing is reserved for a waiter: the key is free once released,
// for whoever asks first, a try-once Obtain included.
//
// Within a Client, the waiters of one key queue in arrival order and only
// the first (the head) asks the masters. Across Clients, the key's value on
// each master holds a turn queue: a refused head appends its Client's id
// (turnID) after the mark, once. The release of such a key announces the
// queue with the key; the first Client in it has the turn: its head asks at
// once, and its acquire carries the rest of the queue (and its own id again
// at the end when it has more waiters of the key) into the new value. The
// other Clients' heads hear that the turn went elsewhere and do not ask at
// once: a release costs one request, not one per waiting Client, when the
// lock is released again within turnWait; after turnWait they ask once (a
// refusal, which queues nobody again). A Client whose turn passes unused
// (its waiters gave up, its process died) holds the others up for turnWait
// at most. A Client whose own release gave the turn to another lets that
// Client ask first (turnLead) before its next waiter of the key asks, or a
// Client that releases and waits again in a loop would take the key back
// nearly every time (TestWaitTurnNotTakenBackByItsReleaser). The turn is a
// courtesy between waiters, not a reservation.
//
// Rules this file keeps, each with the test that fails when it breaks:
//   - A subscription confirmed, first or again, makes every waiter of its
//     master's channel ask again: a release may have gone unheard
//     (TestWaitSubscriptionKilled).
//   - A release announced with this Client's turn, or with no queue, counts
//     for the head; one with another's turn tells the head whether this
//     Client is queued after it; a message that reads both as a key and as
//     a key with a queue is heard both ways (TestReleasedReadsBothWays,
//     TestSleepHearsWhatCameBeforeIt).
//   - A join after Close starts nothing (TestWaitAfterCloseStartsNoSubscription).

import (
	"slices"
	"sync"
	"time"

	"github.com/redlock-go/redlock/internal/wake"
)

// A pass is what a waiter heard of a turn given to another Client.
type pass uint8

const (
	passNone   pass = iota
	passQueued      // this Client queued after it: its turn comes
	passGone        // this Client not queued: it must queue itself again
)

// A waker is a Client's waiting machinery: its subscriptions and its
// waiters by key. It exists from the first wait to Close.
type waker struct {
	c *Client

	mu   sync.Mutex
	keys map[string]*keyWaiters // by full key
	subs *wake.Subs
	// yields are the keys whose release by this Client gave the turn to
	// a queued Client, with until when this Client's next waiter of the
	// key lets that Client ask first (handedTurn).
	yields map[string]time.Time
	closed bool
}

// keyWaiters are this Client's waiters of one key.
type keyWaiters struct {
	queue    []*waiter // in arrival order; queue[0] is the head, who asks the masters
	watchers []*waiter // WaitReleased calls
	// last is the error of the last attempt a head of the key made: what
	// a waiter behind it, which asks nobody, ends with when its wait
	// ends (the key held by another owner, or masters unavailable).
	last error
}

// A waiter is one waiting Obtain (or WaitReleased). Its flags are guarded
// by waker.mu; sig tells it they changed.
type waiter struct {
	key string
	sig chan struct{} // buffered 1
	// released: the masters (bit i) that announced a release of the key
	// since the flags were last cleared, free for this Client (no turn
	// queue, or this Client's turn); retry: a subscription this waiter
	// relies on was (re)established, or it became the head; passed: a
	// master gave the turn to another Client, with this Client queued
	// after it (passQueued) or not (passGone); carry: the turn queue after
	// this Client, from the last release that gave it the turn.
	released uint64
	// announced: the masters that announced a release of the key since
	// the flags were last cleared, whoever the turn went to.
	announced uint64
	retry     bool
	passed    pass
	carry     string
	// behind, for a head that took over from one that obtained the key
	// with this Client queued again in its value: how long to sleep
	// before it asks (the lock's TTL), since the key is this Client's
	// own and its release will give the turn.
	behind time.Duration
	using  bool // it holds a use of its key's subscriptions (use)
}

// handedTurn records that this Client's release of the key full gave the
// turn to the first Client queued in its value: a waiter of full that this
// Client starts now would ask at once, ahead of that Client, which must
// first hear the release, and a Client that releases and waits again in
// a loop would take the key back nearly every time. Its next head of full
// lets the other ask first (turnLead; obtainWait).
func (c *Client) handedTurn(full string, timeout time.Duration) {
	w := c.wakerFor()
	if w == nil {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, t := range w.yields {
		if !now.Before(t) {
			delete(w.yields, k)
		}
	}
	if w.yields == nil {
		w.yields = map[string]time.Time{}
	}
	w.yields[full] = now.Add(turnLead(turnWait(timeout)))
}

// yielding returns how long x, a head about to ask, is still to let the
// Client its Client's release gave the turn to ask first (handedTurn):
// none once x heard that the turn is this Client's.
func (w *waker) yielding(x *waiter) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.yields[x.key]
	if !ok || x.released != 0 || x.carry != "" {
		return 0
	}
	return time.Until(t)
}
func (x *waiter) signal() {
	select {
	case x.sig <- struct{}{}:
	default:
	}
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
		w := &waker{c: c, keys: map[string]*keyWaiters{}}
		masters := make([]wake.Master, len(c.nodes))
		for i, n := range c.nodes {
			masters[i] = wake.Master{RDB: n.Redis(), Cluster: n.Cluster(), Taken: n.Taken()}
		}
		w.subs = wake.New(masters, wake.ProbeChannel(c.turnID), w)
		c.wake = w
	}
	return c.wake
}

// join adds a waiter of full (a watcher with watch set). It returns nil
// once the waker is stopped: Close may run to its end between a wait's
// wakerFor and its join, and a subscription started for the waiter then
// (use) would outlive the Client.
func (w *waker) join(full string, watch bool) *waiter {
	x := &waiter{key: full, sig: make(chan struct{}, 1)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
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
	return x
}

// use takes x's use of the subscriptions of its key, starting those not
// running, before x first sleeps: a wait that never sleeps (the key free
// at its first attempt) subscribes nothing. A subscription that already
// runs may be the one x's wait relies on; one started now is not
// confirmed yet, and its confirmation makes x ask again (confirmed).
func (w *waker) use(x *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || x.using {
		return
	}
	x.using = w.subs.Take(x.key, w.c.all())
}

// leave removes x, gives the head's turn to the next waiter, and lets
// subscriptions without users linger, then end. held is the TTL of the
// lock x obtained with this Client queued again in the key's value, or 0:
// the next head then sleeps until that lock's release gives the turn
// instead of asking at once. A nil x (join after the waker stopped) has
// nothing to leave.
func (w *waker) leave(x *waiter, held time.Duration) {
	if x == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.keys[x.key]
	if i := slices.Index(kw.queue, x); i >= 0 {
		kw.queue = slices.Delete(kw.queue, i, i+1)
		if i == 0 && len(kw.queue) > 0 {
			h := kw.queue[0]
			h.released, h.announced, h.passed, h.carry = 0, 0, passNone, ""
			switch {
			case held > 0:
				h.behind = held
			case x.carry != "" || x.released != 0:
				// x had the turn, or heard a release, and did not use it
				h.released, h.carry = x.released, x.carry
				h.retry = true
			default:
				h.retry = true // the new head asks at once
			}
			h.signal()
		}
	} else if i := slices.Index(kw.watchers, x); i >= 0 {
		kw.watchers = slices.Delete(kw.watchers, i, i+1)
	}
	if len(kw.queue) == 0 && len(kw.watchers) == 0 {
		delete(w.keys, x.key)
	}
	if x.using {
		w.subs.Drop(x.key, w.c.all())
	}
}

// all returns every master of the Client (bit i: master i).
func (c *Client) all() uint64 { return uint64(1)<<len(c.nodes) - 1 }

// noteFailed records err, the failed attempt of x (a head), for the
// waiters behind it.
func (w *waker) noteFailed(x *waiter, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.keys[x.key].last = err
}

// lastFailed returns the error of the last failed attempt of a head of
// x's key, or nil.
func (w *waker) lastFailed(x *waiter) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.keys[x.key].last
}

// isHead reports whether x is its key's head.
func (w *waker) isHead(x *waiter) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.keys[x.key].queue[0] == x
}

// ready returns the masters (bit i) whose subscription for x's key is
// confirmed, and clears x's flags: what happens from now on counts. It
// returns the turn argument of x's next acquire (waitScript): this
// Client's id, then the queue x's turn carries over, then this Client's
// id again when it has more waiters of the key; and the masters that
// announced a release of its key since the flags were last cleared, with
// the turn this Client's or nobody's (none when x is to ask again for
// another reason): the caller tells whether they free a quorum.
func (w *waker) ready(x *waiter) (confirmed uint64, turn string, released, announced uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	turn = w.c.turnID + x.carry
	if len(w.keys[x.key].queue) > 1 && !wake.Queued(x.carry, w.c.turnID) {
		turn += w.c.turnID
	}
	if !x.retry {
		released = x.released
	}
	announced = x.announced
	x.released, x.announced, x.retry, x.passed, x.carry = 0, 0, false, passNone, ""
	return w.subscribed(x), turn, released, announced
}

// subscribed returns the masters (bit i) whose subscription for x's key
// is confirmed; w.mu is held. A waiter relies on the announcements of
// those masters only: it sleeps on them when enough of the masters that
// refused it are among them to tell it a quorum is free (a master down
// for good, whose subscription never comes back, does not keep the others
// asking every node timeout).
func (w *waker) subscribed(x *waiter) uint64 {
	var m uint64
	for i := range w.c.nodes {
		if w.subs.Ready(i, x.key) {
			m |= bit(i)
		}
	}
	return m
}

// behind returns, and clears, how long x, a new head, is to sleep before
// it asks (waiter.behind), and the masters whose subscriptions it may rely
// on (subscribed).
func (w *waker) behind(x *waiter) (time.Duration, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := x.behind
	x.behind = 0
	return d, w.subscribed(x)
}

// flags returns the masters that announced a release since x's flags were
// cleared, whether to ask again at once, and what x heard of a turn given
// to another Client since the last call (it clears that).
func (w *waker) flags(x *waiter) (released uint64, retry bool, passed pass) {
	w.mu.Lock()
	defer w.mu.Unlock()
	passed, x.passed = x.passed, passNone
	return x.released, x.retry, passed
}

// masterChanged asks the probes of master i's subscriptions to look at
// once: a lane saw its run_id change.
func (c *Client) masterChanged(i int) {
	c.mu.Lock()
	w := c.wake
	c.mu.Unlock()
	if w != nil {
		w.subs.Kick(i)
	}
}

// Released handles master i's announcement msg that a key was released:
// the key, and when Clients queued for their turn, a zero byte and the
// queue (releaseScript). The head of the key's waiters hears of it if the
// turn is this Client's, or there is no queue; otherwise it learns that
// the turn went to another Client. The key's watchers hear of it either
// way. A message that reads both as a key this Client waits for and as
// another such key with a queue (keys may hold zero bytes) is heard as
// both: a needless ask costs less than a turn missed.
func (w *waker) Released(i int, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if kw := w.keys[msg]; kw != nil {
		w.heard(i, kw, "")
	}
	key, q, ok := wake.SplitRelease(msg)
	if !ok {
		return
	}
	if q[:wake.IDLen] == w.c.turnID {
		delete(w.yields, key) // the turn is this Client's: nobody to let ask first
	}
	if kw := w.keys[key]; kw != nil { // a key followed by its turn queue
		w.heard(i, kw, q)
	}
}

// heard tells the waiters kw that master i released their key, with the
// turn queue q ("" for none); w.mu is held.
func (w *waker) heard(i int, kw *keyWaiters, q string) {
	if len(kw.queue) > 0 {
		h := kw.queue[0]
		h.announced |= bit(i)
		if q == "" || q[:wake.IDLen] == w.c.turnID {
			h.released |= bit(i)
			if q != "" {
				h.carry = q[wake.IDLen:]
			}
		} else if wake.Queued(q[wake.IDLen:], w.c.turnID) {
			h.passed = max(h.passed, passQueued)
		} else {
			h.passed = passGone
		}
		h.signal()
	}
	for _, x := range kw.watchers {
		x.released |= bit(i)
		x.signal()
	}
}

// stop ends every subscription and waits for their goroutines; Close
// calls it once no wait can begin.
func (w *waker) stop() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.subs.Stop()
}

// Confirmed tells the waiters of the keys on channel ch of master i that
// its subscription is confirmed, first or again: a release may have gone
// unheard meanwhile, so they ask again.
func (w *waker) Confirmed(i int, ch string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, kw := range w.keys {
		if w.c.channelOf(i, key) != ch {
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

// Reset tells every watchdog that a master answers again after its
// subscription broke (resets.go).
func (w *waker) Reset() { w.c.masterReset() }

// channelOf returns master i's wake channel for the key full.
func (c *Client) channelOf(i int, full string) string {
	return wake.Channel(c.nodes[i].Cluster(), full)
}
