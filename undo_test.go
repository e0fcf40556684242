package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// TestUndoWaitsForTheLateAnswer: an attempt decided at its quorum before a
// slow master answered undoes its key there only if that master's answer
// calls for it. A late grant is released; a late refusal (the key is
// another owner's) costs that master no Release at all.
func TestUndoWaitsForTheLateAnswer(t *testing.T) {
	ctx := context.Background()
	c, servers, p, direct := slowThird(t)
	evalshas := func() int {
		info := direct.Info(ctx, "commandstats").Val()
		for line := range strings.SplitSeq(info, "\r\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
				n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				return n
			}
		}
		return 0
	}
	redistest.Eventually(t, func() error { // the warm-up's Release decided at a quorum: the slow master's may still be on its way
		if evalshas() == 0 {
			return errors.New("the warm-up's Release has not reached the slow master")
		}
		return nil
	})
	p.DelayOpen(100*time.Millisecond, 0)

	// Refused by the two fast masters, granted late by the slow one.
	take(t, servers, "granted-late", 0, 1)
	before := evalshas()
	if _, err := c.Obtain(ctx, "granted-late", time.Minute); !errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("Obtain: %v, want ErrTaken", err)
	}
	redistest.Eventually(t, func() error {
		if n := evalshas() - before; n != 1 {
			return fmt.Errorf("the slow master ran %d scripts after its late grant, want its undo", n)
		}
		if n, err := direct.Exists(ctx, "granted-late").Result(); err != nil || n != 0 {
			return errors.New("the late grant's key is still on the slow master")
		}
		return nil
	})

	// Refused by all three, the slow one late: it gets no Release.
	take(t, servers, "refused-late", 0, 1, 2)
	before = evalshas()
	if _, err := c.Obtain(ctx, "refused-late", time.Minute); !errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("Obtain: %v, want ErrTaken", err)
	}
	time.Sleep(400 * time.Millisecond) // the late answer and anything sent after it have arrived
	if n := evalshas() - before; n != 0 {
		t.Fatalf("the slow master ran %d scripts after refusing late: an undo it did not need", n)
	}
	if v, err := direct.Get(ctx, "refused-late").Result(); err != nil || v != "other" {
		t.Fatalf("the other owner's key on the slow master: %q, %v", v, err)
	}
}
