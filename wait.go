package redlock

// Waiting for a lock ([WithWait]): obtainWait asks, sleeps until the
// masters that refused it announce enough releases or their keys could
// have expired, and asks again.
//
// Without fencing, the ask of a head woken by the announced releases of
// enough masters for a quorum to be free (or whose Client has the turn) is
// a plain SET NX with the value the wait script would set: one command on
// the master, not a script's three; sent again after the master closed its
// connection, it sets that same value (acquire_again.lua). Refused (another
// took the key since), it queues nobody, so the head asks again at once
// with the script; at N > 1 a split grant is undone, and the undo's own
// announcement (fewer than a quorum of masters) does not count as a release
// (TestWaitWokenAskIsOneCommand, TestWaitOvertakenAskQueues,
// TestWaitResentPlainAskKeepsTheQueue, TestWaitSplitPlainAskDoesNotSpin,
// TestWaitEndedAfterARefusedPlainAskSaysTaken).
//
// Rules this file keeps, each with the test that fails when it breaks:
//   - A waiter relies on a wake-up only once this Client's subscriptions to
//     the wake channels of enough of the masters that refused it are
//     confirmed to tell it a quorum is free; before that it asks again
//     within a node timeout, and at the confirmation (TestWaitWokenByRelease,
//     TestWaitWithAMasterDown).
//   - A waiter never sleeps past the moment a quorum of the keys it was
//     refused by could have expired (their PTTL; a master not heard before
//     the round decided may be free): a lost notification costs at most
//     that (TestWaitLostNotification, TestQuorumFreeCountsAnUnheardMasterAsFree).
//   - A woken head asks once enough of the masters that refused it
//     announced a release for a quorum to be free, not at the first: at
//     N>1 an early ask meets masters that have not run the release yet, a
//     split vote (TestWaitQuorumOfWakes).
//   - After its first ask a waiter asks the gate first (gateOf), so that
//     waiters woken together do not split the masters; a gate that refuses
//     when a quorum should be free may hold a stray key, and the waiter
//     then asks every master (see obtainWait;
//     TestWaiterObtainsPastAStrayKeyOnTheGate,
//     TestWaiterPastAStrayKeyWithoutWakeUps,
//     TestWaitersOfSeveralClientsPastAStrayKeyOnTheGate,
//     TestWaiterPastAStrayKeyLandedOnTheGateAfterItAnnounced,
//     TestHerdWokenTogetherDoesNotSplitTheMasters,
//     TestHerdConfirmedAfterTheReleaseDoesNotSplitTheMasters); once the
//     gate's key is a node timeout old when the waiter does not lead, or
//     leads and finds the gate's key younger than that, so that a slow
//     winner of the gate has taken the others first (gateSettles;
//     TestHerdDoesNotSplitTheMastersWhileTheGatesWinnerIsSlow,
//     TestTheTurnsLeadLetsAFreshGatesWinnerTakeTheOthers).
//   - Close ends every wait with ErrClosed (TestWaitClose).

import (
	"context"
	"errors"
	"math/bits"
	"slices"
	"time"

	"github.com/redlock-go/redlock/internal/wake"
)

// turnWait is how long a head that heard the turn go to another Client
// waits for that Client's acquire before it asks itself: long enough for
// the other Client to hear the release and ask (a few round trips, and a
// loaded machine's scheduling delays), short enough that a turn nobody
// takes idles the key briefly: a tenth of the node timeout, from 1 ms to
// 50 ms.
func turnWait(timeout time.Duration) time.Duration {
	return min(max(timeout/10, time.Millisecond), 50*time.Millisecond)
}

// gateSettles is how long a waiter refused by a suspect gate waits before
// it asks every master (0: at once): turnWait, or longer while the gate's
// key (pttl left of it) is younger than a node timeout, and a turnWait
// more when it does not lead; the lead asks at once past a key a node
// timeout old. The gate's winner asks the other masters within a node
// timeout of its grant there, and an ask of every master before that ends
// would split them between it and the waiter however slow a loaded
// machine makes the winner (TestHerdDoesNotSplitTheMastersWhileTheGatesWinnerIsSlow),
// the lead's too: another Client's waiter may have taken the gate a
// moment before the lead asked it
// (TestTheTurnsLeadLetsAFreshGatesWinnerTakeTheOthers). The others wait
// the turnWait more so as not to ask every master at the lead's moment. A
// stray key is that old once the waiter has waited so: it costs a node
// timeout at most. The key's age is read against the waiter's own ttl,
// the value holding no TTL of its own: a winner whose TTL differs from the
// waiter's by a node timeout or more looks old; a split then costs an undo
// and another ask, never a second holder.
func gateSettles(ttl, pttl, timeout time.Duration, lead bool) time.Duration {
	age := ttl - pttl
	young := age >= 0 && age < timeout
	if lead && !young {
		return 0
	}
	d := turnWait(timeout)
	if young {
		d = max(d, timeout-age+time.Millisecond)
	}
	if !lead {
		d += turnWait(timeout)
	}
	return d
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
	return c.sleepOn(ctx, w, x, timer, from, need, wait, true)
}

// sleepOn is sleepUntil; without retries, being told to ask again does
// not end the sleep (the flag stays for the next ask).
func (c *Client) sleepOn(ctx context.Context, w *waker, x *waiter, timer *time.Timer, from uint64, need int, wait time.Duration, retries bool) error {
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
			return endedBy(ctx)
		case <-c.closing:
			return ErrClosed
		case <-timer.C:
			return nil
		case <-x.sig:
			released, retry, passed := w.flags(x)
			// A quorum of announcements frees the key whoever refused x: a
			// head refused at the gate alone hears the other masters too,
			// should the gate not announce (frozen since it refused).
			if retry && retries || c.freed(released, from, need) {
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
// or a quorum of them could have expired, whichever comes first. Each
// attempt's token ends with tail (newToken).
func (c *Client) obtainWait(ctx context.Context, key string, ttl time.Duration, tail string) (_ *Lock, n int, _ *obtainRec, _ error) {
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
			return nil, 0, nil, unasked(endedBy(ctx))
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
	// have passed, or a subscription confirmed since the last ask: a
	// release may have gone unheard), and that announced no release in
	// the same wake-up (one that did was taken since, by a waiter woken
	// with this one), may hold
	// a stray key (a contender that died between its SET and its undo, a
	// Release that never reached it): the waiter then asks every master,
	// so a minority of masters cannot keep it from a lock a quorum can
	// grant (TestWaiterObtainsPastAStrayKeyOnTheGate,
	// TestWaiterPastAStrayKeyWithoutWakeUps). At once when it leads (its
	// turn on enough masters, or on the first of the masters that
	// announced) and the gate's key reads a node timeout old or more;
	// otherwise after gateSettles (a turnWait more when it does not lead),
	// so that the waiter that won the gate, or the one that leads, has
	// taken the others first and the masters are not split between waiters
	// woken together (TestHerdWokenTogetherDoesNotSplitTheMasters,
	// TestTheTurnsLeadLetsAFreshGatesWinnerTakeTheOthers). A plain SET
	// refused there reads no age: the gate is asked again, with the
	// script, first. last is the error of
	// the last attempt, each master's entry its last real answer: a
	// gate's refusal alone updates the gate's.
	gate, first := -1, c.gateOf(full)
	askAll := false          // the next ask goes to every master
	var quorumFree time.Time // when the last ask of every master said a quorum could be free
	// heard: the masters that announced a release since the last ask of
	// every master, over all the wake-ups since; a wake-up may bring one
	// master's announcement and the next another's, and together they are
	// the quorum of masters other than the gate that makes a refusing
	// gate suspect (TestWaitersOfSeveralClientsPastAStrayKeyOnTheGate).
	// The gate's own announcement counts until the gate refuses: it was
	// taken since, and a stray key that lands there later announces
	// nothing (TestWaiterPastAStrayKeyLandedOnTheGateAfterItAnnounced).
	var heard uint64
	// seen: the masters whose subscription had confirmed at the last
	// ask. A release a master announced before this Client's subscription
	// there confirmed is heard by no one: a gate that refuses the ask
	// after a new confirmation is suspect, as when a quorum should be free
	// (TestWaitersOfSeveralClientsPastAStrayKeyOnTheGate). That ask goes
	// to the gate all the same, and a suspect gate's waiter asks every
	// master only after gateSettles: waiters of several Clients confirmed
	// together right after a release that all asked every master at once
	// would split the masters (TestHerdConfirmedAfterTheReleaseDoesNotSplitTheMasters).
	var seen uint64
	// readGate: the gate refused a plain SET, which reads no PTTL, when it
	// was suspect: the next ask goes to the gate with the script, which
	// reads it, before any ask of every master (see askAll below).
	var readGate bool
	var last error
	again := "" // the turn of an ask refused and made again at once: ready cleared its carry
	for n = 1; ; n++ {
		confirmed, turn, released, announced := w.ready(x)
		if len(again) > len(turn) {
			turn = again // the queue this Client's turn carries stays (TestWaitersPastAStrayKeyHandTheLockOn)
		}
		again = ""
		woken := c.freed(released, from, need) || readGate // the plain ask's wake-up carries over
		heard |= announced
		// A quorum should be free: this Client's turn on enough masters,
		// the PTTLs of the last ask of every master passed, or a quorum
		// of masters other than the gate announced a release since that
		// ask, whoever's turn, the gate not (a gate that holds a stray key
		// never announces; one that announced and refuses was taken since);
		// or a subscription confirmed since the last ask (see seen).
		others := gate >= 0 && heard&bit(gate) == 0 && bits.OnesCount64(heard) >= c.quorum
		fresh := confirmed&^seen != 0 // a release may have gone unheard
		seen = confirmed
		due := woken || others || fresh || !time.Now().Before(quorumFree)
		lead := woken || others && released&announced&-announced != 0 // the turn on the first that announced
		plain := !c.cfg.fencing && (n == 1 && optimistic || woken) && !readGate
		asked := gate
		if askAll && (gate < 0 || announced&bit(gate) == 0) {
			// Not when the gate announced a release meanwhile: it holds
			// no stray key, and waiters that all asked every master now
			// would split the masters between them
			// (TestHerdWokenTogetherDoesNotSplitTheMasters).
			asked = -1
		}
		askAll, readGate = false, false
		start := time.Now()
		lock, res, err := c.try(ctx, tryArgs{key: key, ttl: ttl, token: newToken(tail), turn: turn, plain: plain, gate: asked})
		wait, blocked := res.wait, res.blocked
		if asked < 0 {
			heard = 0 // this ask read every master's state
		}
		if err == nil {
			if len(turn) > wake.IDLen && turn[len(turn)-wake.IDLen:] == c.turnID {
				held = ttl
			}
			return lock, n, res.rec, nil
		}
		atGate := asked >= 0 && blocked == bit(asked)
		if atGate {
			heard &^= bit(asked) // taken since it announced (see heard)
		}
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
		if atGate && due && !woken && !others && wait <= timeout {
			// Due by time (or a confirmation) alone, and the gate's own key
			// expires within a node timeout: the holder's key there, set a moment after
			// the others, not a stray. Ask the gate again then: waiters
			// woken by the same expiry that asked every master would split
			// the masters (TestHerdWokenTogetherDoesNotSplitTheMasters).
			due = false
		}
		suspect := atGate && due && announced&bit(asked) == 0
		switch {
		case suspect && plain:
			// Its key's age unknown: ask the gate again, with the script.
			readGate = true
		case suspect:
			// Not when the gate announced a release in this wake-up: it
			// was taken since, by a waiter woken with it, not a stray
			// (TestHerdWokenTogetherDoesNotSplitTheMasters).
			askAll = true
			if d := gateSettles(ttl, wait, timeout, lead); d > 0 {
				// A confirmation meanwhile does not cut it short: the ask
				// after it reads every master anyway, and one made before
				// the gate's winner took the others would split the masters
				// (TestHerdConfirmedAfterTheReleaseDoesNotSplitTheMasters).
				timer.Reset(d)
				if cause := c.sleepOn(ctx, w, x, timer, 0, c.quorum, turnWait(timeout), false); cause != nil {
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
			case nil, ErrTaken, errAbsent, errNotAsked, errNoReply:
				// It answers, or was not heard before the round decided
				// (not a failure): ask it first next time. A waiter that
				// asks every master while the others ask the gate splits
				// the masters (TestHerdWokenTogetherDoesNotSplitTheMasters).
				gate = first
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
		if left := time.Until(quorumFree); atGate && left > 0 {
			// The gate's PTTL says nothing of the others: ask every master
			// once the last ask of every master said a quorum is free.
			wait = min(wait, left)
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
