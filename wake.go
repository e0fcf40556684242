package redlock

// Waiting for a lock without polling ([WithWait], [Client.WaitReleased]).
//
// A waiter that finds a key held marks it as waited for (waitScript,
// watchScript: the key's value gets "!" after the token); the release
// of a marked key publishes the key on the master's wake channel
// (releaseScript), and every Client with a waiter of that key hears it. An
// unmarked key, the case with nobody waiting, is released as cheaply as
// before: the mark lives in the value the release reads anyway. Nothing is
// reserved for a waiter: the key is free once released, for whoever asks
// first, a try-once Obtain included.
//
// Within a Client, the waiters of one key queue in arrival order and only
// the first (the head) asks the masters. Across Clients, the key's value on
// each master holds a turn queue: a refused head appends its Client's id
// (turnID) after the mark, once. The release of such a key announces the
// queue with the key; the first Client in it has the turn: its head asks at
// once, and its acquire carries the rest of the queue (and its own id again
// at the end when it has more waiters of the key) into the new value.
// Without fencing, that acquire, like any of a head woken by the announced
// releases of enough masters for a quorum to be free, is a plain SET NX
// with the value the script would set: one command on the master, not a
// script's three; sent again after the master closed its connection, it
// sets that same value (acquireAgainScript). Refused (another took the key
// since), it queues nobody, so the head asks again at once with the script;
// at N > 1 a split grant is undone, and the undo's own announcement (fewer
// than a quorum of masters) does not count as a release
// (TestWaitWokenAskIsOneCommand, TestWaitOvertakenAskQueues,
// TestWaitResentPlainAskKeepsTheQueue, TestWaitSplitPlainAskDoesNotSpin,
// TestWaitEndedAfterARefusedPlainAskSaysTaken). The other Clients' heads
// hear that the turn went elsewhere and do not ask at once: a release costs
// one request, not one per waiting Client, when the lock is released again
// within turnWait. Nothing tells them that the turn was taken, so after
// turnWait they ask once (a refusal, which queues nobody again): a longer
// hold still costs one request per waiting Client, as before turns, only
// not all at once. A Client whose turn passes unused (its waiters gave up,
// its process died) holds the others up for turnWait at most, after which
// they ask as before. A Client whose own release gave the turn to another
// lets that Client ask first (turnLead) before its next waiter of the key
// asks: asking the moment its release returns, ahead of a Client that must
// first hear the announcement, a Client that releases and waits again in a
// loop took the key back nearly every time
// (TestWaitTurnNotTakenBackByItsReleaser). The turn is a courtesy between
// waiters, not a reservation: the key is free once released, and a try-once
// Obtain, a polling one or another Client asking then may take it first;
// the Clients queued stay queued only if a refused one queues itself again.
//
// Rules this file keeps, each with the test that fails when it breaks:
//   - A waiter relies on a wake-up only once this Client's subscriptions to
//     the wake channels of enough of the masters that refused it are
//     confirmed to tell it a quorum is free; before that it asks again
//     within a node timeout, and at the confirmation (TestWaitWokenByRelease,
//     TestWaitWithAMasterDown).
//   - A waiter never sleeps past the moment a quorum of the keys it was
//     refused by could have expired (their PTTL): a lost notification costs
//     at most that (TestWaitLostNotification).
//   - A subscription that breaks and is re-established wakes every waiter
//     of its master to ask again (TestWaitSubscriptionKilled).
//   - A subscription in use is on the master the Client's requests reach:
//     a probe every probeEvery, and at once when a lane sees the master's
//     run_id change, asks that master (PUBSUB NUMSUB of the Client's own
//     channel) and makes the subscription again when it is not there: a
//     Sentinel failover that left the old master up, a connection cut
//     silently (TestWatchdogFollowsASentinelFailoverThatLeavesTheOldMasterUp,
//     TestWatchdogHearsARestartBehindASilentCut,
//     TestProbeChannelRefusedKeepsWaiting,
//     TestProbeBacksOffWhenTheMasterKeepsAnsweringZero,
//     TestCloseReturnsWhenAProbeMeetsAPanickingReconnect).
//   - A waiter refused by the gate alone when a quorum should be free
//     asks every master at once: a stray key on a minority of masters
//     does not keep it from a lock a quorum can grant
//     (TestWaiterObtainsPastAStrayKeyOnTheGate,
//     TestWaiterPastAStrayKeyWithoutWakeUps,
//     TestWaitersOfSeveralClientsPastAStrayKeyOnTheGate).
//   - A woken head asks once enough of the masters that refused it
//     announced a release for a quorum to be free, not at the first: at
//     N>1 an early ask meets masters that have not run the release yet, a
//     split vote (TestWaitQuorumOfWakes).
//   - Close ends every wait with ErrClosed and every subscription's
//     goroutine (TestWaitClose).

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// waitMark follows the owner's token in the value of a key marked as
// waited for (waitScript, watchScript); no token contains it (newToken is
// base64url, and Attach refuses one that does).
const waitMark = "!"

// wakeChannel is the wake channel of a standalone or Sentinel master; a
// Redis Cluster master publishes on the key's own sharded channel, named
// like the key (see channelOf).
const wakeChannel = "redlock:wake"

// subLinger is how long a subscription outlives its last waiter, so that
// a key waited for again and again is not subscribed anew each time.
const subLinger = 2 * time.Second

// A pass is what a waiter heard of a turn given to another Client.
type pass uint8

const (
	passNone   pass = iota
	passQueued      // this Client queued after it: its turn comes
	passGone        // this Client not queued: it must queue itself again
)

// turnIDLen is the length of a Client's id in the turn queues; waitScript
// counts on it (8).
const turnIDLen = 8

// newTurnID returns a random Client id for the turn queues: base64url, so
// it never holds the wait mark, and 48 random bits, so that two Clients
// waiting for one key do not share one.
func newTurnID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// turnWait is how long a head that heard the turn go to another Client
// waits for that Client's acquire before it asks itself: long enough for
// the other Client to hear the release and ask (a few round trips, and a
// loaded machine's scheduling delays), short enough that a turn nobody
// takes idles the key briefly: a tenth of the node timeout, from 1 ms to
// 50 ms.
func turnWait(timeout time.Duration) time.Duration {
	return min(max(timeout/10, time.Millisecond), 50*time.Millisecond)
}

// turnLead is how long a Client that may take a key but whose turn it is
// not (it is not queued, or its own release just gave the turn) lets the
// Client with the turn ask first: long enough for that Client to hear the
// release and its acquire to land (then this Client's, refused, queues
// it), short enough to cost little when that Client does not come. wait
// is the turn's wait (turnWait).
func turnLead(wait time.Duration) time.Duration {
	return max(wait/10, 200*time.Microsecond)
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

// A waker is a Client's waiting machinery: its subscriptions and its
// waiters by key. It exists from the first wait to Close.
type waker struct {
	c *Client

	mu   sync.Mutex
	keys map[string]*keyWaiters // by full key
	subs map[subID]*sub
	// yields are the keys whose release by this Client gave the turn to
	// a queued Client, with until when this Client's next waiter of the
	// key lets that Client ask first (handedTurn).
	yields map[string]time.Time
	closed bool
	wg     sync.WaitGroup // the subscriptions' goroutines
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
	id    subID
	ps    *redis.PubSub // the goroutine's current one (nil before its first); end closes it
	ready bool          // the master confirmed it, and it has not broken since
	// reset says that it broke since its last confirmation, and that the
	// next one is a reset of the master (resets.go); countedAt is when a
	// reset last counted, and owed that one is put off to resetEvery after.
	reset     bool
	owed      bool
	countedAt time.Time
	users     int // waiters and watchdogs using it
	linger    *time.Timer
	stop      chan struct{}
	// probed says that the master confirmed the Client's own channel on
	// this subscription too, so the probe can find it (see probe); kick
	// asks the probe to look at once.
	probed bool
	kick   chan struct{}
	// dead is the last PubSub whose go-redis call panicked (see run): its
	// own mutex may be locked for good, so nobody waits for its Close.
	dead *redis.PubSub
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
		c.wake = &waker{c: c, keys: map[string]*keyWaiters{}, subs: map[subID]*sub{}}
	}
	return c.wake
}

// channelOf returns master i's wake channel for the key full.
func (c *Client) channelOf(i int, full string) string {
	if c.shardedMask&bit(i) != 0 {
		return full
	}
	return wakeChannel
}

// newOp is newOp with what the Client knows of its masters: which ones
// announce releases on sharded channels.
func (c *Client) newOp(kind opKind, full, ckey, token string) op {
	o := newOp(kind, full, ckey, token)
	o.sharded = c.shardedMask
	return o
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
	x.using = true
	w.take(x.key, w.c.all())
}

// take adds a user to the subscriptions of the wake channel of the key
// full on the masters in masters (bit i: master i), starting those not
// running; w.mu is held.
func (w *waker) take(full string, masters uint64) {
	for i := range w.c.nodes {
		if masters&bit(i) == 0 {
			continue
		}
		id := subID{i, w.c.channelOf(i, full)}
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
}

// drop removes a user that take added, and lets subscriptions without
// users linger, then end; w.mu is held.
func (w *waker) drop(full string, masters uint64) {
	for i := range w.c.nodes {
		if masters&bit(i) == 0 {
			continue
		}
		s := w.subs[subID{i, w.c.channelOf(i, full)}]
		if s.users--; s.users == 0 {
			s.linger = time.AfterFunc(subLinger, func() { w.unsubscribe(s) })
		}
	}
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
	if w.closed || !x.using {
		return
	}
	w.drop(x.key, w.c.all())
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
	if len(w.keys[x.key].queue) > 1 && !queued(x.carry, w.c.turnID) {
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
		if s := w.subs[subID{i, w.c.channelOf(i, x.key)}]; s != nil && s.ready {
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

// queued reports whether the turn queue q holds id.
func queued(q, id string) bool {
	for ; len(q) >= turnIDLen; q = q[turnIDLen:] {
		if q[:turnIDLen] == id {
			return true
		}
	}
	return false
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

// subscribe starts the subscription id; w.mu is held. The goroutine makes
// the PubSub and subscribes, so that a dial to a master that is down holds
// nobody else.
func (w *waker) subscribe(id subID) *sub {
	s := &sub{id: id, stop: make(chan struct{}), kick: make(chan struct{}, 1)}
	w.subs[id] = s
	w.wg.Add(1)
	go w.run(s)
	if w.c.shardedMask&bit(id.i) == 0 {
		w.wg.Add(1)
		go w.probe(s)
	}
	return s
}

// unsubscribe ends s if it is still unused after its linger.
func (w *waker) unsubscribe(s *sub) {
	w.mu.Lock()
	if s.users > 0 || w.closed || w.subs[s.id] != s {
		w.mu.Unlock()
		return
	}
	delete(w.subs, s.id)
	ps := s.end()
	w.mu.Unlock()
	if ps != nil {
		_ = ps.Close() // may wait for a dial in progress: not under w.mu
	}
}

// end stops s and returns its PubSub, for the caller to close once w.mu is
// released: closing it ends a Receive in progress, but waits for a dial
// in progress on it (go-redis dials under the PubSub's mutex), and every
// waiter of the Client takes w.mu to begin and end its wait. w.mu is held.
func (s *sub) end() *redis.PubSub {
	close(s.stop)
	ps := s.ps
	s.ps = nil
	return ps
}

// The delays before a lost subscription is made again: the first, doubled
// at each failure in a row up to the last, and back to the first once a
// master confirms it. The last bounds how late a watchdog hears that a
// master that was down answers again (resets.go).
const (
	subRetryMin = 50 * time.Millisecond
	subRetryMax = 250 * time.Millisecond
)

// resetEvery is how often at most a subscription's breaks count as resets
// of its master (resets.go): one that the master cuts again and again as
// soon as it is made (a client output buffer limit, say) would otherwise
// renew every watchdog of the Client at each cut.
const resetEvery = time.Second

// run keeps s subscribed, each time on a new PubSub, and reads its
// messages until it is stopped. A subscription that fails (the master
// down, the connection killed) or panics (a go-redis hook of the
// application's) is lost: its waiters no longer count on it (they ask
// again within a node timeout, or at their keys' PTTL), and it is made
// again after a delay that grows while it keeps failing (no busy loop).
// Every confirmation wakes the waiters of the master to ask again, since a
// release may have gone unheard meanwhile.
func (w *waker) run(s *sub) {
	defer w.wg.Done()
	if n := w.c.nodes[s.id.i]; n.cluster == nil {
		// go-redis v9.23 races with itself when a PubSub's first
		// connection is made while a connection of Client.Conn (a lane's)
		// is set up on a client whose server refuses the maintenance
		// notifications handshake (Redis before 8): the one that fails
		// first rewrites the shared options under its own lock, not the
		// client's. Once a lane has taken a connection, none will.
		select {
		case <-n.taken:
		case <-s.stop:
			return
		}
	}
	backoff := time.NewTimer(0)
	<-backoff.C
	defer backoff.Stop()
	delay := subRetryMin
	for {
		ps := w.open(s)
		if ps == nil {
			return // stopped
		}
		err := w.listen(s, ps, &delay)
		w.confirmed(s, false)
		if _, panicked := err.(errPanicked); panicked {
			// A PubSub that panicked may hold its own lock (go-redis
			// dials again inside Receive under it, without a defer):
			// closing it could block for ever. It is dropped instead,
			// and end must not close it either; a panicking dial left
			// it without a connection.
			w.mu.Lock()
			if s.ps == ps {
				s.ps = nil
			}
			s.dead = ps
			w.mu.Unlock()
		} else {
			_ = ps.Close()
		}
		backoff.Reset(delay)
		if refusedCommand(err) {
			// The master's user may not subscribe (or the server does
			// not know the command): it is up, so no reset is to be
			// heard soon; try once a second (README).
			delay = min(2*delay, time.Second)
		} else {
			delay = min(2*delay, subRetryMax)
		}
		select {
		case <-s.stop:
			return
		case <-backoff.C:
		}
	}
}

// open makes a new PubSub for s, or returns nil once s is stopped.
func (w *waker) open(s *sub) *redis.PubSub {
	rdb := w.c.nodes[s.id.i].rdb
	var ps *redis.PubSub
	if w.c.shardedMask&bit(s.id.i) != 0 { // no channel yet: nothing is dialled
		ps = rdb.SSubscribe(context.Background())
	} else {
		ps = rdb.Subscribe(context.Background())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-s.stop:
		_ = ps.Close()
		return nil
	default:
	}
	s.ps = ps // for end, which closes it
	return ps
}

// probeEvery is how often a subscription in use checks that it is on the
// master the Client's requests reach (probe).
const probeEvery = 250 * time.Millisecond

// probeChannel is the Client's own channel on a standalone or Sentinel
// master. Nothing is published on it: a subscription subscribes to it
// beside the wake channel, so that PUBSUB NUMSUB, asked of the master the
// Client's requests reach, says whether the subscription is there.
func (c *Client) probeChannel() string { return wakeChannel + ":" + c.turnID }

// probe checks, every probeEvery while s has users, and at once when a
// lane saw the master's run_id change (masterChanged), that the master
// the Client's requests reach has s: PUBSUB NUMSUB of the Client's own
// channel, through the master's client, answers 1. An answer of 0 says
// that s is on another server or on none: a Sentinel failover that left
// the old master up (go-redis moves its commands to the new master, not
// its subscriptions, and a master demoted by REPLICAOF keeps its
// subscribers), or a connection cut silently while the master restarted.
// s is then closed: run makes it again, on the master the client dials
// now, and its confirmation after that break is a reset (resets.go).
// A master that does not answer the probe tells nothing: renewals and
// PTTLs cover it. (TestWatchdogFollowsASentinelFailoverThatLeavesTheOldMasterUp,
// TestWatchdogHearsARestartBehindASilentCut, TestProbeChannelRefusedKeepsWaiting)
func (w *waker) probe(s *sub) {
	defer w.wg.Done()
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	ch, rdb := w.c.probeChannel(), w.c.nodes[s.id.i].rdb
	misses, ticks := 0, 0 // answers of 0 in a row; ticks since the last probe
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			// A master that keeps answering 0 (a proxy in front of
			// several servers, say) is asked ever less often, down to
			// every 8s, and the subscription is not made again and
			// again (TestProbeBacksOffWhenTheMasterKeepsAnsweringZero).
			if ticks++; ticks < 1<<min(misses, 5) {
				continue
			}
		case <-s.kick:
		}
		ticks = 0
		ps := w.probing(s)
		if ps == nil {
			continue
		}
		n, err := numSub(rdb, ch)
		switch {
		case err == nil && n > 0:
			misses = 0
		case err == nil && w.probing(s) == ps:
			misses++
			w.closeSub(s, ps)
		case refusedCommand(err): // the user may not ask PUBSUB NUMSUB
			w.mu.Lock()
			s.probed = false // until the next confirmation
			w.mu.Unlock()
		}
	}
}

// closeSub closes ps, s's PubSub, so that run sees its Receive fail and
// makes it again. Outside w.mu, and on a goroutine of its own: a go-redis
// reconnect that panicked inside Receive leaves the PubSub's mutex locked
// for good, and its Close would never return (run then marks it dead); the
// probe waits for the Close only until s is stopped
// (TestCloseReturnsWhenAProbeMeetsAPanickingReconnect).
func (w *waker) closeSub(s *sub, ps *redis.PubSub) {
	done := make(chan struct{})
	go func() {
		_ = ps.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-s.stop:
	}
}

// numSub asks the master how many subscribers ch has, within probeEvery; a
// panic of a go-redis hook is an error.
func numSub(rdb redis.UniversalClient, ch string) (n int64, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = errPanicked{v}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), probeEvery)
	defer cancel()
	m, err := rdb.PubSubNumSub(ctx, ch).Result()
	return m[ch], err
}

// probing returns s's PubSub when the probe is to look at it: it has
// users, and the master confirmed it and the Client's own channel on it.
func (w *waker) probing(s *sub) *redis.PubSub {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.subs[s.id] != s || !s.ready || !s.probed || s.users == 0 {
		return nil
	}
	return s.ps
}

// setProbed records that the master confirmed the Client's own channel on s.
func (w *waker) setProbed(s *sub) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s.probed = s.ready
}

// isReady reports whether the master confirmed s.
func (w *waker) isReady(s *sub) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return s.ready
}

// masterChanged asks the probes of master i's subscriptions to look at
// once: a lane saw its run_id change.
func (c *Client) masterChanged(i int) {
	c.mu.Lock()
	w := c.wake
	c.mu.Unlock()
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, s := range w.subs {
		if id.i == i {
			select {
			case s.kick <- struct{}{}:
			default:
			}
		}
	}
}

// errDropped ends a subscription the master dropped (listen).
var errDropped = errors.New("redlock: the master dropped the wake channel's subscription")

// listen subscribes ps to s's channel and reads it until it fails, or
// panics (the panic is returned as an errPanicked). A confirmation resets
// *delay to the first retry delay.
func (w *waker) listen(s *sub, ps *redis.PubSub, delay *time.Duration) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = errPanicked{v}
		}
	}()
	ctx := context.Background()
	own := "" // the Client's own channel, subscribed after the wake channel (probe)
	if w.c.shardedMask&bit(s.id.i) != 0 {
		err = ps.SSubscribe(ctx, s.id.ch)
	} else {
		own = w.c.probeChannel()
		if err = ps.Subscribe(ctx, s.id.ch); err == nil {
			err = ps.Subscribe(ctx, own)
		}
	}
	for err == nil {
		var msg any
		msg, err = ps.Receive(ctx)
		if own != "" && err != nil && refusedCommand(err) && w.isReady(s) {
			// The wake channel is confirmed and the user may not
			// subscribe to the Client's own: no probe on this
			// subscription (README).
			own, err = "", nil
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			switch {
			case m.Kind == "subscribe" && m.Channel == own:
				w.setProbed(s)
			case m.Kind == "subscribe", m.Kind == "ssubscribe":
				*delay = subRetryMin
				w.confirmed(s, true)
			case m.Kind == "unsubscribe", m.Kind == "sunsubscribe":
				// The master dropped the subscription, its connection
				// open: a Redis Cluster master no longer serving the
				// channel's slot. It is made again, where the slot is
				// now.
				err = errDropped
			}
		case *redis.Message:
			w.released(s.id.i, m.Payload)
		}
	}
	return err
}

// confirmed records that s is (or is no longer) confirmed, and on
// confirmation wakes the waiters of its master to ask again. A
// confirmation after a break renews the Client's watchdogs at once
// (resets.go): the master answers again, and may have lost its keys. Breaks
// count so once per resetEvery at most, and the end of a subscription that
// nobody uses any more is none.
func (w *waker) confirmed(s *sub, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !ok {
		// A failure before the first confirmation counts as a break too:
		// the master may have restarted since the lock was taken
		// (TestWatchdogHearsARestartDuringItsFirstSubscribe).
		s.ready, s.probed, s.reset = false, false, true
		return
	}
	if s.ready {
		return
	}
	s.ready = true
	live := !w.closed && w.subs[s.id] == s // not one ended (unsubscribe, stop)
	if s.reset && live {
		// A reset within resetEvery of the last one that counted is put
		// off to its end, not dropped: the master may have lost its keys
		// again (a second restart).
		if wait := resetEvery - time.Since(s.countedAt); s.countedAt.IsZero() || wait <= 0 {
			s.countedAt = time.Now()
			w.c.masterReset()
		} else if !s.owed {
			s.owed = true
			time.AfterFunc(wait, func() {
				w.mu.Lock()
				defer w.mu.Unlock()
				s.owed = false
				if !w.closed && w.subs[s.id] == s {
					s.countedAt = time.Now()
					w.c.masterReset()
				}
			})
		}
	}
	s.reset = false
	for key, kw := range w.keys {
		if w.c.channelOf(s.id.i, key) != s.id.ch {
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

// released handles master i's announcement msg that a key was released:
// the key, and when Clients queued for their turn, a zero byte and the
// queue (releaseScript). The head of the key's waiters hears of it if the
// turn is this Client's, or there is no queue; otherwise it learns that
// the turn went to another Client. The key's watchers hear of it either
// way. A message that reads both as a key this Client waits for and as
// another such key with a queue (keys may hold zero bytes) is heard as
// both: a needless ask costs less than a turn missed.
func (w *waker) released(i int, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if kw := w.keys[msg]; kw != nil {
		w.heard(i, kw, "")
	}
	j := strings.LastIndexByte(msg, 0)
	if j < 0 || len(msg)-j-1 < turnIDLen || (len(msg)-j-1)%turnIDLen != 0 {
		return
	}
	key, q := msg[:j], msg[j+1:]
	if q[:turnIDLen] == w.c.turnID {
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
		if q == "" || q[:turnIDLen] == w.c.turnID {
			h.released |= bit(i)
			if q != "" {
				h.carry = q[turnIDLen:]
			}
		} else if queued(q[turnIDLen:], w.c.turnID) {
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

// gateOf returns the master that waiters of full ask first (fanoutGated),
// or -1 with one master: the one whose address hashed with the key ranks
// highest, so that every Client that names the masters alike picks the
// same one, whatever their order, and keys spread over the masters.
func (c *Client) gateOf(full string) int {
	if len(c.nodes) == 1 {
		return -1
	}
	best, top := 0, uint64(0)
	for i, n := range c.nodes {
		h := uint64(14695981039346656037) // FNV-1a
		for _, s := range [...]string{n.addr, "\x00", full} {
			for j := 0; j < len(s); j++ {
				h = (h ^ uint64(s[j])) * 1099511628211
			}
		}
		if i == 0 || h > top {
			best, top = i, h
		}
	}
	return best
}

// stop ends every subscription and waits for their goroutines; Close
// calls it once no wait can begin.
//
// The PubSubs are closed outside w.mu, each on a goroutine of its own: a
// dial in progress on one (go-redis dials under the PubSub's mutex) that
// panics leaves that mutex locked for good, and its Close would never
// return. stop waits for every Close but those of PubSubs whose
// goroutine saw such a panic (sub.dead), which stay blocked.
func (w *waker) stop() {
	type closing struct {
		s    *sub
		ps   *redis.PubSub
		done chan struct{}
	}
	var cs []closing
	w.mu.Lock()
	w.closed = true
	for id, s := range w.subs {
		if s.linger != nil {
			s.linger.Stop()
		}
		if ps := s.end(); ps != nil {
			cs = append(cs, closing{s, ps, make(chan struct{})})
		}
		delete(w.subs, id)
	}
	w.mu.Unlock()
	for _, c := range cs {
		go func() {
			_ = c.ps.Close()
			close(c.done)
		}()
	}
	w.wg.Wait() // each goroutine has seen its PubSub closed, or panic
	for _, c := range cs {
		w.mu.Lock()
		dead := c.s.dead == c.ps
		w.mu.Unlock()
		if !dead {
			<-c.done
		}
	}
}

// quorumFree returns how long until a quorum of masters could be free,
// from a failed attempt's answers: 0 for a master that granted, had no
// key, or was not heard before the round decided (it may be free), its
// PTTL for one held by another owner; ok is false when failures leave no
// quorum in sight (the masters did not say).
func (c *Client) quorumFree(rd *round) (time.Duration, bool) {
	var waits []time.Duration
	for i, n := range rd.nodes {
		switch {
		case n.Err == nil || n.Err == errAbsent:
			waits = append(waits, 0)
		case n.Err == ErrTaken && rd.vals[i] >= 0: // its PTTL; 0: it expires within the millisecond
			waits = append(waits, time.Duration(rd.vals[i])*time.Millisecond)
		case n.Err == ErrTaken && rd.vals[i] == -2: // gone since
			waits = append(waits, 0)
		case n.Err == errNoReply: // not heard before the round decided: it may be free
			waits = append(waits, 0)
		}
	}
	if len(waits) < c.quorum {
		return 0, false
	}
	slices.Sort(waits)
	return waits[c.quorum-1], true
}

// sleepUntil waits until x hears from at least need of the masters in
// from, or from a quorum of any, that they released its key (a wake-up),
// until the timer fires, or
// until it is told to ask again; it returns the error that ends the wait
// when ctx ends or the Client closes. When a master gives the turn to
// another Client with this one queued after it, the timer is set to wait
// from then (turnWait: the other Client's acquire carries the queue on, or
// it does not come); when this Client is not queued (a Client that did not
// carry the queue took the key since it queued), to a fraction of that:
// long enough for the other Client's acquire to land first, so that this
// one's, refused, queues it again.
func (c *Client) sleepUntil(ctx context.Context, w *waker, x *waiter, timer *time.Timer, from uint64, need int, wait time.Duration) error {
	need = max(need, 1)
	stop := func() {
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
	defer stop()
	short := false // the timer is set to queue x again: later passes do not put it off
	// Read the flags once before sleeping: they may have been set with no
	// signal left to say so (a new head takes the hand-over's signal in
	// obtainWait's loop, and a release announced before that loop ran
	// coalesced with it).
	x.signal()
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-c.closing:
			return ErrClosed
		case <-timer.C:
			return nil
		case <-x.sig:
			released, retry, passed := w.flags(x)
			// A quorum of announcements frees the key whoever refused x: a
			// head refused at the gate alone hears the other masters too,
			// should the gate not announce (frozen since it refused).
			if retry || c.freed(released, from, need) {
				return nil
			}
			switch {
			case short:
			case passed == passQueued:
				stop()
				timer.Reset(wait)
			case passed == passGone:
				stop()
				timer.Reset(turnLead(wait))
				short = true
			}
		}
	}
}

// freed reports whether the masters in released, which announced a
// release of a key, can have freed a quorum: need of those in from (the
// ones that refused the last ask), or a quorum of any.
func (c *Client) freed(released, from uint64, need int) bool {
	return bits.OnesCount64(released&from) >= need || bits.OnesCount64(released) >= c.quorum
}

// obtainWait is obtainLoop for WithWait: after a failed attempt it sleeps
// until the releases of enough of the keys that blocked it are announced,
// or a quorum of them could have expired, whichever comes first.
func (c *Client) obtainWait(ctx context.Context, key string, ttl time.Duration) (_ *Lock, n int, _ []NodeError, _ error) {
	w := c.wakerFor()
	if w == nil {
		return nil, 0, nil, c.closedObtain(ErrClosed)
	}
	full := c.cfg.keyPrefix + key
	x := w.join(full, false)
	if x == nil {
		return nil, 0, nil, c.closedObtain(ErrClosed)
	}
	var held time.Duration // see leave
	defer func() { w.leave(x, held) }()
	// unasked is the end of a wait that asked no master: it ends as the
	// head's last attempt did (the key held, most often), not as an
	// outage.
	unasked := func(cause error) error {
		if last := w.lastFailed(x); last != nil {
			return wrapCause(last, cause)
		}
		return c.unanswered("obtain", nil, cause, ErrNotObtained)
	}
	for !w.isHead(x) { // this Client's waiters of the key, in arrival order
		select {
		case <-x.sig:
		case <-ctx.Done():
			return nil, 0, nil, unasked(context.Cause(ctx))
		case <-c.closing:
			return nil, 0, nil, c.closedObtain(ErrClosed)
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	timeout := c.cfg.timeout(ttl)
	// Before its first ask, a head sleeps when the head before it holds
	// the key with this Client queued again (its release gives the turn),
	// or when this Client's release of the key just gave the turn to
	// another Client (let it ask first).
	d, confirmed := w.behind(x)
	pass := turnWait(timeout)
	if d > 0 {
		w.use(x)
		if bits.OnesCount64(confirmed) < c.quorum {
			d = min(d, timeout)
		}
		d += time.Millisecond
	} else if d = w.yielding(x); d > 0 {
		pass = d
	}
	// from and need are what the last sleep waited for: a head asks with a
	// plain SET NX only when that many of those masters (or a quorum of
	// any) announced a release since, not at an announcement of its own
	// undo (a split grant's release announces the turn queue it carried).
	from, need := uint64(0), c.quorum
	// A head that asks without sleeping first asks with a plain SET NX
	// too: the key is most often free (a WithWait Obtain nobody holds the
	// key against), and a script would cost the master three commands
	// where the SET costs one; refused, it asks again at once with the
	// script, which queues it (TestWaitUncontendedAskIsOneCommand).
	optimistic := d <= 0 // a yield that lapsed: no sleep either
	if d > 0 {
		from = c.all()
		timer.Reset(d)
		if cause := c.sleepUntil(ctx, w, x, timer, c.all(), c.quorum, pass); cause != nil {
			if errors.Is(cause, ErrClosed) {
				return nil, 0, nil, c.closedObtain(ErrClosed)
			}
			return nil, 0, nil, unasked(cause)
		}
	}
	// The first script attempt asks every master (and marks the key on
	// every one that refuses; a plain ask before it marks nothing); the
	// next ones ask the gate first, while it answers. A gate that refuses
	// when a quorum should be free (enough masters announced a release
	// with this Client's turn, or a quorum of them with anyone's while the
	// gate announced none, or the PTTLs of the last ask of every master
	// have passed) may hold
	// a stray key (a contender that died between its SET and its undo, a
	// Release that never reached it): the waiter then asks every master,
	// so a minority of masters cannot keep it from a lock a quorum can
	// grant (TestWaiterObtainsPastAStrayKeyOnTheGate,
	// TestWaiterPastAStrayKeyWithoutWakeUps). At once when it leads: its
	// turn on enough masters, or on the first of the masters that
	// announced; otherwise after turnWait, so that the waiter that won
	// the gate, or the one that leads, has taken the others first and the
	// masters are not split between waiters woken together
	// (TestHerdWokenTogetherDoesNotSplitTheMasters). last is the error of
	// the last attempt, each master's entry its last real answer: a
	// gate's refusal alone updates the gate's.
	gate, first := -1, c.gateOf(full)
	askAll := false          // the next ask goes to every master
	var quorumFree time.Time // when the last ask of every master said a quorum could be free
	var last error
	again := "" // the turn of an ask refused and made again at once: ready cleared its carry
	for n = 1; ; n++ {
		confirmed, turn, released, announced := w.ready(x)
		if len(again) > len(turn) {
			turn = again // the queue this Client's turn carries stays (TestWaitersPastAStrayKeyHandTheLockOn)
		}
		again = ""
		woken := c.freed(released, from, need)
		// A quorum should be free: this Client's turn on enough masters,
		// the PTTLs of the last ask of every master passed, or a quorum
		// of masters other than the gate announced a release, whoever's
		// turn, the gate not (a gate that holds a stray key never
		// announces; one that announced and refuses was taken since).
		others := gate >= 0 && announced&bit(gate) == 0 && bits.OnesCount64(announced) >= c.quorum
		due := woken || others || !time.Now().Before(quorumFree)
		lead := woken || others && released&announced&-announced != 0 // the turn on the first that announced
		plain := !c.cfg.fencing && (n == 1 && optimistic || woken)
		asked := gate
		if askAll {
			asked, askAll = -1, false
		}
		start := time.Now()
		lock, nodes, wait, blocked, err := c.try(ctx, key, ttl, nil, newToken(), turn, plain, asked)
		if err == nil {
			if len(turn) > turnIDLen && turn[len(turn)-turnIDLen:] == c.turnID {
				held = ttl
			}
			return lock, n, nodes, nil
		}
		atGate := asked >= 0 && blocked == bit(asked)
		// refused: the masters that said the key is held; only their
		// announcements can come.
		var refused uint64
		var qe *QuorumError
		if atGate {
			refused = bit(asked)
			err = withAnswer(last, err, asked)
		} else {
			if !plain { // a refused SET says nothing of the key's PTTL
				quorumFree = start.Add(wait)
			}
			if errors.As(err, &qe) {
				for i, nd := range qe.Nodes {
					if nd.Err == ErrTaken {
						refused |= bit(i)
					}
				}
			}
		}
		if err := c.cutShort(ctx, err, last); err != nil {
			return nil, n, nil, err
		}
		last = err // what this wait ends with if the next ask is cut short (cutShort)
		w.noteFailed(x, err)
		if atGate && due {
			askAll = true
			if !lead {
				timer.Reset(turnWait(timeout))
				if cause := c.sleepUntil(ctx, w, x, timer, 0, c.quorum, turnWait(timeout)); cause != nil {
					return nil, n, nil, wrapCause(err, cause)
				}
			}
		}
		if plain || askAll {
			again = turn
			// Taken by another since the release (this Client is not
			// queued there yet), or a gate that refuses when a quorum
			// should be free: ask again at once, with waitScript, unless
			// a quorum announced a release meanwhile: an announcement of
			// its own undo (a split grant's release announces the turn
			// queue it carried) does not count.
			from, need = 0, c.quorum
			continue
		}
		gate = -1
		if first >= 0 && errors.As(err, &qe) {
			switch qe.Nodes[first].Err {
			case nil, ErrTaken, errAbsent, errNotAsked:
				gate = first // it answers: ask it first next time
			}
		}
		// A quorum can be free once so many of the masters it did not get
		// announce a release.
		need = max(bits.OnesCount64(blocked)-(len(c.nodes)-c.quorum), 1)
		from = blocked
		if bits.OnesCount64(confirmed&refused) < need {
			// A release now may go unheard: ask again soon, or at the
			// confirmation (a retry flag).
			wait = min(wait, timeout)
		}
		if atGate {
			// The gate's PTTL says nothing of the others: ask every master
			// once the last ask of every master said a quorum is free.
			wait = min(wait, time.Until(quorumFree))
		}
		timer.Reset(wait + time.Millisecond)
		w.use(x)
		if cause := c.sleepUntil(ctx, w, x, timer, blocked, need, turnWait(timeout)); cause != nil {
			return nil, n, nil, wrapCause(err, cause)
		}
	}
}

// withAnswer returns the error of a gated ask that the gate (master gate)
// refused: last, the attempt before's, with the gate's answer from cur,
// since the gate alone was asked; cur when there is no earlier attempt.
func withAnswer(last, cur error, gate int) error {
	lq, ok := last.(*QuorumError)
	cq, ok2 := cur.(*QuorumError)
	switch {
	case !ok && last != nil:
		return last
	case !ok || !ok2:
		return cur
	}
	e := *lq
	e.Nodes = slices.Clone(lq.Nodes)
	e.Nodes[gate] = cq.Nodes[gate]
	return &e
}

// WaitReleased waits until the current holder of key releases it, or its
// lock expires: the wait of a worker that lost the race for a piece of
// work (a cache entry to rebuild) and wants its result, not the lock. It
// returns nil once it finds key absent on a quorum of masters: at once
// when it is, else after the releases of key are announced (the same
// wake-up [WithWait] uses) or a quorum of the keys it saw could have
// expired, whichever comes first, and it looks again. A release that
// leaves the key in place (a lock held at least for a while,
// [WithHoldAtLeast]) is announced, and WaitReleased then waits for the
// rest of that while. A key that expired and was taken again before it
// looked keeps it waiting for the new holder. It returns an error when ctx
// ends (wrapping its cause), on [Client.Close] (matching [ErrClosed]), or
// when too few masters answer (matching [ErrUnavailable]).
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
	if x == nil {
		return ErrClosed
	}
	defer w.leave(x, 0)
	timeout := c.cfg.timeout(maxDefaultNodeTimeout * 10)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		confirmed, _, _, _ := w.ready(x)
		o := c.newOp(opWatch, full, "", "")
		deadline := time.Now().Add(timeout)
		rd := c.fanout(ctx, o, deadline, timeout)
		pending := 0
		for _, nd := range rd.nodes {
			if nd.Err == errNoReply {
				pending++
			}
		}
		if rd.refused < c.quorum && rd.refused+pending >= c.quorum {
			// The round decided at N - quorum + 1 "absent" answers: at an
			// even N one short of the quorum of absent keys this needs.
			// Hear the others, when they can make it
			// (TestWaitReleasedOnAFreeKeyAtEveryMasterCount).
			c.collect(ctx, rd, pending, capDeadline(ctx, deadline), timeout, false)
		}
		var held uint64
		answered, absent := 0, 0
		for i, nd := range rd.nodes {
			switch nd.Err {
			case nil: // held: read as a refusal with its PTTL, for quorumFree
				held |= bit(i)
				answered++
				rd.nodes[i].Err = ErrTaken
			case errAbsent:
				answered++
				absent++
			}
		}
		wait, ok := c.quorumFree(rd)
		var err error
		if answered < c.quorum {
			err = c.quorumError("wait", rd, ErrUnavailable)
		}
		rd.done()
		switch {
		case err != nil:
			return err
		case absent >= c.quorum:
			return nil
		}
		if !ok { // a key without expiry: look again, not at once
			wait = jitter(timeout/2, timeout)
		}
		// Free on a quorum once so many of the masters that hold it
		// announce a release; then look again: a release may have left
		// the key for the rest of a minimum hold (keepScript).
		need := c.quorum - absent
		if bits.OnesCount64(confirmed&held) < need {
			wait = min(wait, timeout)
		}
		timer.Reset(wait + time.Millisecond)
		w.use(x)
		if cause := c.sleepUntil(ctx, w, x, timer, held, need, timeout); cause != nil {
			return fmt.Errorf("redlock: waiting for %q to be released: %w", key, cause)
		}
	}
}
