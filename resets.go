package redlock

import "time"

// A watchdog renews its lock at once when a master's connection comes back
// after it broke, instead of at its next renewal (ttl/3 by default): a master
// restarted without persistence, or a Sentinel failover to a replica that
// never got the key, has lost the lock, and another Client can take it the
// moment the master answers again. The renewal then re-takes the vanished
// key first (extend.lua), or finds another owner and tells the work at
// once (ErrLockLost), where it would have run on for up to a renewal
// period beside the new holder.
//
// What tells is the wake machinery's subscription to the master (internal/wake/subs.go):
// a long-lived connection whose reader sees the socket fail the moment the
// master goes, and whose re-subscription says when it answers again: at
// once after a short restart, else within the subscription's retry delay
// (50ms, doubling to 250ms while the master stays down). A change of master
// that breaks no connection (a Sentinel failover that demotes the old
// master, a connection cut silently while the master restarted) is found
// by the subscription's probe within probeEvery (250ms), which makes the
// subscription again on the master the Client's requests reach: a break,
// and a reset once confirmed. While a watchdog
// runs, its Client keeps that subscription to every standalone or Sentinel
// master (the wake channel, shared with the Client's waiters), and lets it
// linger as waiters' do. Not to a Redis Cluster: there each key announces
// on a channel of its own, and a subscription per lock held would be a
// connection per lock; a watchdog there renews on its schedule.
//
// Rules, each with the test that fails when it breaks:
//   - A subscription confirmed again after it broke renews every watchdog
//     of the Client at once, and a renewal that then fails is tried again
//     within 4 x resetGap, still owed; a first confirmation renews nothing
//     unless attempts failed before it (the master may have restarted
//     since the lock was taken), nor does the end of a subscription nobody
//     uses any more (TestWatchdogRenewsAtOnceAfterARestart,
//     TestWatchdogTellsAtOnceWhenARestartLostTheLock,
//     TestWatchdogHearsALongerOutageSoon,
//     TestWatchdogHearsARestartDuringItsFirstSubscribe,
//     TestWatchdogIgnoresTheEndOfAnUnusedSubscription).
//   - A watchdog renews on such a signal at most once per resetGap, the
//     signals in between folded into one renewal at its end; a renewal
//     owed to a reset stays owed while the caller's own Extend or Release
//     holds the lock, whatever that call changes (TestWatchdogFoldsResetSignals,
//     TestWatchdogResetDuringACallersExtendIsNotLost).
//   - A subscription's breaks count once per resetEvery at most, a later
//     one put off to its end, not dropped: one that the master cuts again
//     and again does not turn every lock's renewals into a stream, and a
//     second restart soon after the first is still heard
//     (TestWatchdogFlappingSubscription,
//     TestWatchdogHearsASecondResetSoonAfterTheFirst).
//   - A watchdog's use of the subscriptions ends with it, also when Close
//     races its start, and a Cluster master gets none
//     (TestWatchdogLeavesNoSubscription, TestCloseRacesStartingWatchdogs,
//     TestWatchdogKeepsNoSubscriptionOnACluster).
//   - A subscription to a standalone master is made only once a lane has
//     taken a connection of that master's client: go-redis v9.23 races
//     with itself otherwise (TestWatchdogSubscribesAfterTheLanesFirstConnection;
//     see waker.run).

// resetGap is the least time between two renewals a watchdog makes on a
// reset signal.
const resetGap = 50 * time.Millisecond

// masterReset tells every watchdog that a master's connection came back
// after it broke.
func (c *Client) masterReset() {
	if r := c.renew.Load(); r != nil {
		r.resetAll()
	}
}

// hold keeps this Client subscribed to the wake channel of the key full on
// every master but the Redis Clusters while a watchdog runs, and returns
// the waker to give to unhold when that use ends; nil when it does nothing
// (once the Client is closing). A Cluster master announces on each key's
// own channel: a subscription per lock held would be a connection per
// lock.
func (c *Client) hold(full string) *waker {
	masters := c.all() &^ c.shardedMask
	if masters == 0 {
		return nil
	}
	w := c.wakerFor()
	if w == nil || !w.subs.Take(full, masters) {
		return nil
	}
	return w
}

// unhold ends a use of hold's, which returned w.
func (c *Client) unhold(w *waker, full string) {
	if w != nil {
		w.subs.Drop(full, c.all()&^c.shardedMask)
	}
}
