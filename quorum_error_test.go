package redlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestEveryOutcomeMatchesOneKind runs Obtain, Extend, Release and
// WaitReleased over every assignment of the masters' states, at even
// master counts too (where half the masters holding the key does not rule
// a quorum out, and half silent leaves too few answers): a failed Obtain
// matches exactly one of ErrTaken and ErrUnavailable; a failed Extend or
// Release exactly one of ErrLockLost and ErrUnavailable, never ErrTaken; a
// WaitReleased that too few masters answered only ErrUnavailable, whoever
// holds the key on the others.
func TestEveryOutcomeMatchesOneKind(t *testing.T) {
	const (
		free = iota // Obtain, WaitReleased: no key. Extend, Release: our key
		stranger
		down
		absent // Extend, Release: our key gone
	)
	names := [...]string{"free", "stranger", "down", "absent"}
	ctx := context.Background()
	for n := 1; n <= 5; n++ {
		t.Run(fmt.Sprint("N=", n), func(t *testing.T) {
			ms, cs := minis(t, n)
			c := newClient(t, cs, WithNodeTimeout(time.Second))
			q := n/2 + 1
			// set puts the masters in state, for key held by token (our
			// key's states) or by nobody.
			set := func(key, token string, state []int) {
				for i, m := range ms {
					m.SetError("")
					m.Del(key)
					switch state[i] {
					case free:
						if token != "" {
							m.Set(key, token)
						}
					case stranger:
						m.Set(key, "stranger")
					case down:
						m.SetError("LOADING pretend down")
					}
				}
			}
			up := func() {
				for _, m := range ms {
					m.SetError("")
				}
			}
			each := func(states int, f func(state []int, count [4]int, label string)) {
				combos := 1
				for range n {
					combos *= states
				}
				for combo := range combos {
					state := make([]int, n)
					var count [4]int
					label := ""
					for i, x := 0, combo; i < n; i, x = i+1, x/states {
						state[i] = x % states
						count[state[i]]++
						label += " " + names[state[i]]
					}
					f(state, count, fmt.Sprintf("N=%d [%s]", n, label[1:]))
				}
			}
			each(3, func(state []int, count [4]int, label string) {
				key := "obtain" + label
				set(key, "", state)
				l, err := c.Obtain(ctx, key, time.Minute)
				up()
				if (err == nil) != (count[free] >= q) {
					t.Fatalf("%s: Obtain: %v, want success %v", label, err, count[free] >= q)
				}
				if err == nil {
					_ = l.Release(ctx)
					return
				}
				taken, unavailable := oneOutcome(t, label+": Obtain", err)
				if taken == unavailable || taken != (count[stranger] > n-q) {
					t.Fatalf("%s: Obtain: %v, want taken %v", label, err, count[stranger] > n-q)
				}
			})
			each(3, func(state []int, count [4]int, label string) {
				key := "wait" + label
				if count[down] <= n-q && count[free] < q {
					return // answered, and held: it waits for a release
				}
				set(key, "", state)
				err := c.WaitReleased(ctx, key)
				up()
				if err == nil && count[free] < q {
					t.Fatalf("%s: WaitReleased returned nil with the key free on %d masters, quorum %d", label, count[free], q)
				}
				if err == nil {
					return
				}
				if taken, unavailable := oneOutcome(t, label+": WaitReleased", err); taken || !unavailable {
					t.Fatalf("%s: WaitReleased that too few masters answered: %v, want ErrUnavailable only", label, err)
				}
			})
			for _, op := range []string{"Extend", "Release"} {
				each(4, func(state []int, count [4]int, label string) {
					key := op + label
					up()
					l, err := c.Obtain(ctx, key, time.Minute)
					if err != nil {
						t.Fatal(err)
					}
					set(key, l.Token(), state)
					if op == "Extend" {
						err = l.Extend(ctx, time.Minute)
					} else {
						err = l.Release(ctx)
					}
					up()
					if err == nil {
						return
					}
					lost := errors.Is(err, ErrLockLost)
					if taken, unavailable := oneOutcome(t, label+": "+op, err); taken || lost == unavailable {
						t.Fatalf("%s: %s: %v matches ErrLockLost %v, ErrTaken %v, ErrUnavailable %v: want exactly one of ErrLockLost and ErrUnavailable",
							label, op, err, lost, taken, unavailable)
					}
					if lost && count[stranger]+count[absent] <= n-q {
						t.Fatalf("%s: %s: %v, lost with our key on a quorum", label, op, err)
					}
				})
			}
		})
	}
}

// TestUnavailableQuorumErrorIsNeverTaken: a QuorumError of kind
// ErrUnavailable (WaitReleased's, when too few masters answered) matches
// only ErrUnavailable, and says so, whatever the masters that answered
// said: at N=4, two masters holding the key and two silent.
func TestUnavailableQuorumErrorIsNeverTaken(t *testing.T) {
	silent := fmt.Errorf("%w (%w)", errNoReply, context.DeadlineExceeded)
	qe := &QuorumError{Op: "wait", Quorum: 3, kind: ErrUnavailable, Nodes: []NodeError{
		{Addr: "a", Err: ErrTaken}, {Addr: "b", Err: ErrTaken}, {Addr: "c", Err: silent}, {Addr: "d", Err: silent},
	}}
	if taken, unavailable := oneOutcome(t, "wait", qe); taken || !unavailable {
		t.Fatalf("%v: taken %v, unavailable %v: want ErrUnavailable only", qe, taken, unavailable)
	}
	if !errors.Is(qe, context.DeadlineExceeded) {
		t.Fatalf("%v does not match the silent masters' timeouts", qe)
	}
}
