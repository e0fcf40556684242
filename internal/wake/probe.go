package wake

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/wire"
)

// probeEvery is how often a subscription in use checks that it is on the
// master the Client's requests reach.
const probeEvery = 250 * time.Millisecond

// probe checks, every probeEvery while x has users, and at once when
// kicked (a lane saw the master's run_id change), that the master the
// Client's requests reach has x: PUBSUB NUMSUB of the Client's own channel,
// through the master's client, answers 1. An answer of 0 says that x is on
// another server or on none: a Sentinel failover that left the old master
// up (go-redis moves its commands to the new master, not its
// subscriptions, and a master demoted by REPLICAOF keeps its subscribers),
// or a connection cut silently while the master restarted. x is then
// closed: run makes it again, on the master the client dials now, and its
// confirmation after that break is a reset. A master that does not answer
// the probe tells nothing: renewals and PTTLs cover it. A master that keeps
// answering 0 (a proxy in front of several servers, say) is asked ever less
// often, down to every 8s, and the subscription is not made again and again
// (TestWatchdogFollowsASentinelFailoverThatLeavesTheOldMasterUp,
// TestWatchdogHearsARestartBehindASilentCut,
// TestProbeChannelRefusedKeepsWaiting,
// TestProbeBacksOffWhenTheMasterKeepsAnsweringZero).
func (s *Subs) probe(x *sub) {
	defer s.wg.Done()
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	rdb := s.masters[x.id.i].RDB
	misses, ticks := 0, 0 // answers of 0 in a row; ticks since the last probe
	for {
		select {
		case <-x.stop:
			return
		case <-t.C:
			if ticks++; ticks < 1<<min(misses, 5) {
				continue
			}
		case <-x.kick:
		}
		ticks = 0
		ps := s.probing(x)
		if ps == nil {
			continue
		}
		n, err := numSub(rdb, s.probeCh)
		switch {
		case err == nil && n > 0:
			misses = 0
		case err == nil && s.probing(x) == ps:
			misses++
			s.closeSub(x, ps)
		case wire.RefusedCommand(err): // the user may not ask PUBSUB NUMSUB
			s.mu.Lock()
			x.probed = false // until the next confirmation
			s.mu.Unlock()
		}
	}
}

// closeSub closes ps, x's PubSub, so that run sees its Receive fail and
// makes it again. Outside s.mu, and on a goroutine of its own: a go-redis
// reconnect that panicked inside Receive leaves the PubSub's mutex locked
// for good, and its Close would never return (run then marks it dead); the
// probe waits for the Close only until x is stopped
// (TestCloseReturnsWhenAProbeMeetsAPanickingReconnect).
func (s *Subs) closeSub(x *sub, ps *redis.PubSub) {
	done := make(chan struct{})
	go func() {
		_ = ps.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-x.stop:
	}
}

// numSub asks the master how many subscribers ch has, within probeEvery; a
// panic of a go-redis hook is an error.
func numSub(rdb redis.UniversalClient, ch string) (n int64, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = panicError{v}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), probeEvery)
	defer cancel()
	m, err := rdb.PubSubNumSub(ctx, ch).Result()
	return m[ch], err
}

// probing returns x's PubSub when the probe is to look at it: it has
// users, and the master confirmed it and the Client's own channel on it.
// One whose confirmations do not come is not looked at: listen breaks it
// at their bound (confirmMin, and more while it keeps happening)
// (TestWatchdogHearsARestartWhenTheSubscriptionsConfirmationIsLost,
// TestWatchdogHearsARestartWhenTheProbeChannelsConfirmationIsLost).
func (s *Subs) probing(x *sub) *redis.PubSub {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.subs[x.id] != x || !x.ready || !x.probed || x.users == 0 {
		return nil
	}
	return x.ps
}

// setProbed records that the master confirmed the Client's own channel on x.
func (s *Subs) setProbed(x *sub) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x.probed = x.ready
}

// isReady reports whether the master confirmed x.
func (s *Subs) isReady(x *sub) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return x.ready
}
