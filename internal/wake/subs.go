// Package wake keeps a Client's subscriptions to its masters' wake
// channels: one per master and channel, shared by every waiter and
// watchdog that uses it, made again whenever it breaks, and checked to be
// on the master the Client's requests reach. It knows nothing of waiters:
// it tells its Client what the masters announce, when a subscription is
// confirmed, and when a master answers again after a break (Events).
//
// Rules it keeps, each with the test that fails when it breaks:
//   - A subscription that breaks is made again, after a delay that grows
//     while it keeps failing (no busy loop), and its confirmation tells the
//     Client (Events.Confirmed): a release may have gone unheard meanwhile
//     (TestWaitSubscriptionKilled).
//   - A confirmation after a break, or after attempts that failed before
//     the first one, is a reset of the master (Events.Reset), at most once
//     per resetEvery, a later one put off to its end, not dropped; the end
//     of a subscription nobody uses is none
//     (TestWatchdogRenewsAtOnceAfterARestart,
//     TestWatchdogHearsARestartDuringItsFirstSubscribe,
//     TestWatchdogHearsASecondResetSoonAfterTheFirst,
//     TestWatchdogFlappingSubscription,
//     TestWatchdogIgnoresTheEndOfAnUnusedSubscription).
//   - A subscription in use is on the master the Client's requests reach:
//     see probe (TestWatchdogFollowsASentinelFailoverThatLeavesTheOldMasterUp,
//     TestWatchdogHearsARestartBehindASilentCut).
//   - A subscription whose confirmations (the wake channel's, and the
//     Client's own channel's that the probe looks for) do not all come
//     within a bound of its SUBSCRIBE (confirmMin, growing while it keeps
//     happening) is broken: it is made again on a new connection, and its
//     confirmation after that is a reset, as after any break. Its
//     connection may have gone dark after the master ran the SUBSCRIBE,
//     and the probe looks only at confirmed subscriptions: the read would
//     wait until TCP gives up, for ever behind a path that drops every
//     packet
//     (TestWatchdogHearsARestartWhenTheSubscriptionsConfirmationIsLost,
//     TestWatchdogHearsARestartWhenTheProbeChannelsConfirmationIsLost).
//   - A subscription to a standalone master is made only once a lane has
//     taken a connection of that master's client: go-redis v9.23 races with
//     itself otherwise (TestWatchdogSubscribesAfterTheLanesFirstConnection).
//   - Stop ends every subscription's goroutines, also those of PubSubs whose
//     go-redis call panicked, and nothing starts after it
//     (TestWaitClose, TestWaitCloseAfterPanickedReconnect,
//     TestCloseReturnsWhenAProbeMeetsAPanickingReconnect).
package wake

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/wire"
)

// A Master is what the subscriptions need of one master.
type Master struct {
	RDB     redis.UniversalClient
	Cluster bool            // a Redis Cluster: one sharded channel per key, no probe
	Taken   <-chan struct{} // closed once a lane took a connection of RDB (a standalone master)
}

// Events are what the subscriptions tell their Client. Subs calls them
// without holding its lock, so they may call Subs.
type Events interface {
	// Released: master i announced msg on a wake channel (SplitRelease).
	Released(i int, msg string)
	// Confirmed: master i confirmed the subscription to ch, first or again.
	Confirmed(i int, ch string)
	// Reset: a master answers again after its subscription broke: it may
	// have lost its keys (a restart, a failover).
	Reset()
}

// Linger is how long a subscription outlives its last user, so that a key
// waited for again and again is not subscribed anew each time.
const Linger = 2 * time.Second

// The delays before a lost subscription is made again: the first, doubled
// at each failure in a row up to the last, and back to the first once a
// master confirms it. The last bounds how late a watchdog hears that a
// master that was down answers again.
const (
	retryMin = 50 * time.Millisecond
	retryMax = 250 * time.Millisecond
)

// The bound on a subscription's confirmations (listen), from its
// SUBSCRIBE: the first, doubled at each subscription left unconfirmed in a
// row up to the last, and back to the first once all its confirmations
// came. It is counted in probe periods, not in a node timeout: the
// subscriptions serve every key of the Client, whatever its TTL, and the
// probe is the other watch on a subscription that went dark. A
// confirmation is the answer to one request, as the probe's is, but on a
// connection just made, to two commands, from a master or on a machine
// that may be loaded, and a late one taken for lost costs a needless reset
// (every watchdog of the Client renews): so a few periods, growing for a
// master that keeps answering late, up to the probe's slowest period. The
// first bounds, with retryMax, how late a watchdog hears of a master that
// restarted while the confirmation was lost.
const (
	confirmMin = 4 * probeEvery
	confirmMax = 32 * probeEvery
)

// resetEvery is how often at most a subscription's breaks count as resets
// of its master: one that the master cuts again and again as soon as it is
// made (a client output buffer limit, say) would otherwise renew every
// watchdog of the Client at each cut.
const resetEvery = time.Second

// Subs are a Client's subscriptions. The zero value is not usable: New.
type Subs struct {
	masters []Master
	probeCh string
	ev      Events

	mu     sync.Mutex
	subs   map[id]*sub
	closed bool
	wg     sync.WaitGroup // the subscriptions' goroutines
}

// New returns the subscriptions of a Client with those masters and that
// probe channel (ProbeChannel), telling ev.
func New(masters []Master, probeChannel string, ev Events) *Subs {
	return &Subs{masters: masters, probeCh: probeChannel, ev: ev, subs: map[id]*sub{}}
}

// An id names a subscription: a master and a channel.
type id struct {
	i  int
	ch string
}

// A sub is one subscription to one master's wake channel, with the
// goroutines that read it and probe it. Its fields are guarded by Subs.mu.
type sub struct {
	id    id
	ps    *redis.PubSub // the goroutine's current one (nil before its first); end closes it
	ready bool          // the master confirmed it, and it has not broken since
	// reset says that it broke since its last confirmation, and that the
	// next one is a reset of the master; countedAt is when a reset last
	// counted, and owed that one is put off to resetEvery after.
	reset     bool
	owed      bool
	countedAt time.Time
	users     int // waiters and watchdogs using it
	linger    *time.Timer
	stop      chan struct{}
	// probed says that the master confirmed the Client's own channel on
	// this subscription too, so the probe can find it; kick asks the probe
	// to look at once.
	probed bool
	kick   chan struct{}
	// dead is the last PubSub whose go-redis call panicked (see run): its
	// own mutex may be locked for good, so nobody waits for its Close.
	dead *redis.PubSub
}

func bit(i int) uint64 { return 1 << i }

// Take adds a user to the subscriptions of key's wake channel on the
// masters in masters (bit i: master i), starting those not running. It
// reports false, and starts nothing, once Stop has begun.
func (s *Subs) Take(key string, masters uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	for i, m := range s.masters {
		if masters&bit(i) == 0 {
			continue
		}
		k := id{i, Channel(m.Cluster, key)}
		x := s.subs[k]
		if x == nil {
			x = s.subscribe(k)
		}
		x.users++
		if x.linger != nil {
			x.linger.Stop()
			x.linger = nil
		}
	}
	return true
}

// Drop removes a user that Take added, and lets subscriptions without
// users linger, then end.
func (s *Subs) Drop(key string, masters uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for i, m := range s.masters {
		if masters&bit(i) == 0 {
			continue
		}
		x := s.subs[id{i, Channel(m.Cluster, key)}]
		if x.users--; x.users == 0 {
			x.linger = time.AfterFunc(Linger, func() { s.unsubscribe(x) })
		}
	}
}

// Ready reports whether master i confirmed the subscription of key's wake
// channel, and it has not broken since: a waiter relies on its
// announcements only then.
func (s *Subs) Ready(i int, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.subs[id{i, Channel(s.masters[i].Cluster, key)}]
	return x != nil && x.ready
}

// Kick asks the probes of master i's subscriptions to look at once: a lane
// saw its run_id change.
func (s *Subs) Kick(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, x := range s.subs {
		if k.i == i {
			select {
			case x.kick <- struct{}{}:
			default:
			}
		}
	}
}

// subscribe starts the subscription k; s.mu is held. Its goroutine makes
// the PubSub and subscribes, so that a dial to a master that is down holds
// nobody else.
func (s *Subs) subscribe(k id) *sub {
	x := &sub{id: k, stop: make(chan struct{}), kick: make(chan struct{}, 1)}
	s.subs[k] = x
	s.wg.Add(1)
	go s.run(x)
	if !s.masters[k.i].Cluster {
		s.wg.Add(1)
		go s.probe(x)
	}
	return x
}

// unsubscribe ends x if it is still unused after its linger.
func (s *Subs) unsubscribe(x *sub) {
	s.mu.Lock()
	if x.users > 0 || s.closed || s.subs[x.id] != x {
		s.mu.Unlock()
		return
	}
	delete(s.subs, x.id)
	ps := x.end()
	s.mu.Unlock()
	if ps != nil {
		_ = ps.Close() // may wait for a dial in progress: not under s.mu
	}
}

// end stops x and returns its PubSub, for the caller to close once s.mu is
// released: closing it ends a Receive in progress, but waits for a dial in
// progress on it (go-redis dials under the PubSub's mutex). s.mu is held.
func (x *sub) end() *redis.PubSub {
	close(x.stop)
	ps := x.ps
	x.ps = nil
	return ps
}

// Stop ends every subscription and waits for their goroutines; nothing
// starts after it. The PubSubs are closed outside s.mu, each on a
// goroutine of its own: a dial in progress on one (go-redis dials under
// the PubSub's mutex) that panics leaves that mutex locked for good, and
// its Close would never return. Stop waits for every Close but those of
// PubSubs whose goroutine saw such a panic (sub.dead), which stay blocked.
func (s *Subs) Stop() {
	type closing struct {
		x    *sub
		ps   *redis.PubSub
		done chan struct{}
	}
	var cs []closing
	s.mu.Lock()
	s.closed = true
	for k, x := range s.subs {
		if x.linger != nil {
			x.linger.Stop()
		}
		if ps := x.end(); ps != nil {
			cs = append(cs, closing{x, ps, make(chan struct{})})
		}
		delete(s.subs, k)
	}
	s.mu.Unlock()
	for _, c := range cs {
		go func() {
			_ = c.ps.Close()
			close(c.done)
		}()
	}
	s.wg.Wait() // each goroutine has seen its PubSub closed, or panic
	for _, c := range cs {
		s.mu.Lock()
		dead := c.x.dead == c.ps
		s.mu.Unlock()
		if !dead {
			<-c.done
		}
	}
}

// run keeps x subscribed, each time on a new PubSub, and reads its
// messages until it is stopped. A subscription that fails (the master
// down, the connection killed) or panics (a go-redis hook of the
// application's) is lost: its waiters no longer count on it, and it is
// made again after a delay that grows while it keeps failing.
func (s *Subs) run(x *sub) {
	defer s.wg.Done()
	if m := s.masters[x.id.i]; !m.Cluster {
		// go-redis v9.23 races with itself when a PubSub's first
		// connection is made while a connection of Client.Conn (a lane's)
		// is set up on a client whose server refuses the maintenance
		// notifications handshake (Redis 7 does): the one that fails
		// first rewrites the shared options under its own lock, not the
		// client's. Once a lane has taken a connection, none will.
		select {
		case <-m.Taken:
		case <-x.stop:
			return
		}
	}
	backoff := time.NewTimer(0)
	<-backoff.C
	defer backoff.Stop()
	delay, confirm := retryMin, confirmMin
	for {
		ps := s.open(x)
		if ps == nil {
			return // stopped
		}
		err := s.listen(x, ps, &delay, &confirm)
		s.confirmed(x, false)
		if _, panicked := err.(panicError); panicked {
			// A PubSub that panicked may hold its own lock (go-redis
			// dials again inside Receive under it, without a defer):
			// closing it could block for ever. It is dropped instead, and
			// end must not close it either.
			s.mu.Lock()
			if x.ps == ps {
				x.ps = nil
			}
			x.dead = ps
			s.mu.Unlock()
		} else {
			_ = ps.Close()
		}
		backoff.Reset(delay)
		if wire.RefusedCommand(err) {
			// The master's user may not subscribe (or the server does not
			// know the command): it is up, so no reset is to be heard
			// soon; try once a second (docs/waiting.md).
			delay = min(2*delay, time.Second)
		} else {
			delay = min(2*delay, retryMax)
		}
		select {
		case <-x.stop:
			return
		case <-backoff.C:
		}
	}
}

// open makes a new PubSub for x, or returns nil once x is stopped.
func (s *Subs) open(x *sub) *redis.PubSub {
	m := s.masters[x.id.i]
	var ps *redis.PubSub
	if m.Cluster { // no channel yet: nothing is dialled
		ps = m.RDB.SSubscribe(context.Background())
	} else {
		ps = m.RDB.Subscribe(context.Background())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-x.stop:
		_ = ps.Close()
		return nil
	default:
	}
	x.ps = ps // for end, which closes it
	return ps
}

// errDropped ends a subscription the master dropped (listen).
var errDropped = errors.New("redlock: the master dropped the wake channel's subscription")

// errUnconfirmed ends a subscription whose confirmations did not come in
// time (listen).
var errUnconfirmed = errors.New("redlock: the master did not confirm the wake channel's subscription in time")

// panicError is a panic of a go-redis call (a hook of the application's).
type panicError struct{ v any }

func (e panicError) Error() string {
	return fmt.Sprintf("redlock: panic in a subscription (a go-redis hook?): %v", e.v)
}

// listen subscribes ps to x's channel, and to the Client's own on a
// standalone or Sentinel master, and reads it until it fails, or panics
// (returned as a panicError). Its confirmations must all come within
// *confirm of the SUBSCRIBE (errUnconfirmed, which doubles *confirm up to
// confirmMax). The wake channel's confirmation resets *delay to the first
// retry delay; all of them reset *confirm to confirmMin.
func (s *Subs) listen(x *sub, ps *redis.PubSub, delay, confirm *time.Duration) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = panicError{v}
		}
	}()
	ctx := context.Background()
	own := ""    // the Client's own channel, subscribed after the wake channel (probe)
	waiting := 1 // confirmations (or refusals) still to read
	if s.masters[x.id.i].Cluster {
		err = ps.SSubscribe(ctx, x.id.ch)
	} else {
		own, waiting = s.probeCh, 2
		if err = ps.Subscribe(ctx, x.id.ch); err == nil {
			err = ps.Subscribe(ctx, own)
		}
	}
	// The SUBSCRIBE is written, on a connection made for it (the dial and
	// its handshake have go-redis's own bounds): its answers are due.
	due := time.Now().Add(*confirm)
	answered := func() {
		if waiting--; waiting == 0 {
			*confirm = confirmMin
		}
	}
	for err == nil {
		var msg any
		if waiting > 0 {
			// A read bounded by a timeout keeps the PubSub's connection
			// when it times out (go-redis dials again on other errors,
			// under the PubSub's mutex); run closes it.
			wait := time.Until(due)
			if wait > 0 {
				msg, err = ps.ReceiveTimeout(ctx, wait)
			}
			if ne := net.Error(nil); wait <= 0 || errors.As(err, &ne) && ne.Timeout() {
				*confirm = min(*confirm*2, confirmMax)
				return errUnconfirmed
			}
		} else {
			msg, err = ps.Receive(ctx)
		}
		if own != "" && err != nil && wire.RefusedCommand(err) && s.isReady(x) {
			// The wake channel is confirmed and the user may not
			// subscribe to the Client's own: no probe on this
			// subscription (docs/waiting.md; TestProbeChannelRefusedKeepsWaiting).
			own, err = "", nil
			answered()
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			switch {
			case m.Kind == "subscribe" && m.Channel == own:
				s.setProbed(x)
				answered()
			case m.Kind == "subscribe", m.Kind == "ssubscribe":
				*delay = retryMin
				s.confirmed(x, true)
				answered()
			case m.Kind == "unsubscribe", m.Kind == "sunsubscribe":
				// The master dropped the subscription, its connection
				// open: a Redis Cluster master no longer serving the
				// channel's slot. It is made again, where the slot is
				// now.
				err = errDropped
			}
		case *redis.Message:
			s.ev.Released(x.id.i, m.Payload)
		}
	}
	return err
}

// confirmed records that x is (or is no longer) confirmed, and on
// confirmation tells the Client (Events.Confirmed), and of a reset when
// it broke before (Events.Reset): the master answers again, and may have
// lost its keys. Breaks count so once per resetEvery at most, and the end
// of a subscription nobody uses any more is none.
func (s *Subs) confirmed(x *sub, ok bool) {
	s.mu.Lock()
	if !ok {
		// A failure before the first confirmation counts as a break too:
		// the master may have restarted since the lock was taken.
		x.ready, x.probed, x.reset = false, false, true
		s.mu.Unlock()
		return
	}
	if x.ready {
		s.mu.Unlock()
		return
	}
	x.ready = true
	live := !s.closed && s.subs[x.id] == x // not one ended (unsubscribe, Stop)
	reset := false
	if x.reset && live {
		// A reset within resetEvery of the last one that counted is put
		// off to its end, not dropped: the master may have lost its keys
		// again (a second restart).
		if wait := resetEvery - time.Since(x.countedAt); x.countedAt.IsZero() || wait <= 0 {
			x.countedAt, reset = time.Now(), true
		} else if !x.owed {
			x.owed = true
			time.AfterFunc(wait, func() {
				s.mu.Lock()
				x.owed = false
				live := !s.closed && s.subs[x.id] == x
				if live {
					x.countedAt = time.Now()
				}
				s.mu.Unlock()
				if live {
					s.ev.Reset()
				}
			})
		}
	}
	x.reset = false
	s.mu.Unlock()
	if reset {
		s.ev.Reset()
	}
	s.ev.Confirmed(x.id.i, x.id.ch)
}
