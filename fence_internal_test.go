package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// TestRaiseDropsMastersNotRaised: a master whose counter cannot be raised to
// the fence no longer counts toward the quorum.
func TestRaiseDropsMastersNotRaised(t *testing.T) {
	ms, cs := minis(t, 3)
	c := newClient(t, cs, WithFencing())
	ms[0].Set("k", "tok")
	ms[1].Set("k", "tok")
	ms[2].Set("k", "other") // lost between the acquire and the raise
	rd := c.round()
	defer rd.done()
	copy(rd.vals, []int64{10, 1, 1})
	for i := range rd.nodes {
		rd.nodes[i].Err = nil
	}
	rd.ok = 3
	l := &Lock{target: wire.NewTarget("k", "{k}:fence", "tok")}
	fence := c.raise(context.Background(), rd, l, time.Second)
	if fence != 10 || rd.ok != 2 || rd.nodes[2].Err == nil || rd.nodes[1].Err != nil {
		t.Fatalf("fence %d ok %d nodes %v", fence, rd.ok, rd.nodes)
	}
	if v, _ := ms[1].Get("{k}:fence"); v != "10" {
		t.Fatalf("master 1's counter %q, want 10", v)
	}
	if ms[2].Exists("{k}:fence") {
		t.Fatal("raised the counter of a master where the lock is not ours")
	}
}
