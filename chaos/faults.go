package chaos

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
)

// faultToxicType is the toxiproxy type name of faultToxic.
const faultToxicType = "chaos_faults"

// Registering a toxic type is how toxiproxy learns of one (its own toxics do
// the same); it happens once, before any proxy exists.
func init() { toxics.Register(faultToxicType, new(faultToxic)) }

// A fault is one open fault window on one direction of a proxy.
type fault struct {
	delay, jitter time.Duration // Delay
	stall         bool          // Stall
	reset         bool          // Reset: a chunk swallowed, the connection closed after after
	after         time.Duration
}

// faults is the state of one direction of one proxy: its open fault windows
// by toxic name. Every change closes changed (and makes a new one), so a
// faultToxic holding a chunk sees it at once.
type faults struct {
	mu      sync.Mutex
	open    map[string]fault
	cut     uint64 // bumped to close every connection alive: a stall removed, Refuse
	changed chan struct{}
	now     atomic.Pointer[faultView] // what they add up to, read on every chunk
}

func newFaults() *faults {
	f := &faults{open: make(map[string]fault), changed: make(chan struct{})}
	f.now.Store(&faultView{changed: f.changed})
	return f
}

// faultView is what a direction's faults do to a chunk now.
type faultView struct {
	delay, jitter time.Duration
	stall         bool
	reset         bool
	after         time.Duration
	cut           uint64
	changed       <-chan struct{}
}

func (f *faults) view() *faultView { return f.now.Load() }

// notify sums the open faults up and tells every faultToxic of the change;
// f.mu is held.
func (f *faults) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
	v := faultView{cut: f.cut, changed: f.changed}
	for _, x := range f.open {
		v.delay += x.delay
		v.jitter += x.jitter
		v.stall = v.stall || x.stall
		if x.reset && (!v.reset || x.after < v.after) {
			v.reset, v.after = true, x.after
		}
	}
	f.now.Store(&v)
}

func (f *faults) add(name string, x fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.open[name] = x
	f.notify()
}

// remove ends the named fault; removing a stall closes every live connection.
func (f *faults) remove(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	x, ok := f.open[name]
	if !ok {
		return false
	}
	delete(f.open, name)
	if x.stall {
		f.cut++
	}
	f.notify()
	return true
}

// clear ends every fault, as remove does each.
func (f *faults) clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range f.open {
		if x.stall {
			f.cut++
			break
		}
	}
	clear(f.open)
	f.notify()
}

// cutAll closes every connection alive now.
func (f *faults) cutAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut++
	f.notify()
}

// faultToxic is the one toxic of each direction of every proxy: it plays the
// direction's faults on each connection's chunks, in order. It never blocks
// without also watching its faults and toxiproxy's interrupt, and it keeps a
// chunk across an interrupt in its stub's state instead of handing it on, so
// an interrupt never waits for a reader that may be gone.
type faultToxic struct {
	f *faults // set before the proxy starts
}

// faultStub is a faultToxic's state on one connection.
type faultStub struct {
	cut     uint64              // the faults' cut when the connection opened
	pending *stream.StreamChunk // taken from Input, not handed on yet
}

// NewState implements toxics.StatefulToxic.
func (t *faultToxic) NewState() any { return &faultStub{cut: t.f.view().cut} }

// GetBufferSize implements toxics.BufferedToxic: chunks queue here while one
// is held back, as in toxiproxy's latency toxic.
func (t *faultToxic) GetBufferSize() int { return 1024 }

// Pipe implements toxics.Toxic.
func (t *faultToxic) Pipe(stub *toxics.ToxicStub) {
	st := stub.State.(*faultStub)
	if stub.Closed() {
		drain(stub)
		return
	}
	for {
		c := st.pending
		st.pending = nil
		if c == nil {
			v := t.f.view()
			if v.cut != st.cut {
				cut(stub)
				return
			}
			select {
			case <-stub.Interrupt:
				return
			case <-v.changed:
				continue
			case c = <-stub.Input:
				if c == nil {
					stub.Close()
					return
				}
			}
		}
		if !t.pass(stub, st, c) {
			return
		}
	}
}

// pass plays the faults on chunk c until it is handed on or swallowed (true),
// or the connection is closed or the toxic interrupted (false).
func (t *faultToxic) pass(stub *toxics.ToxicStub, st *faultStub, c *stream.StreamChunk) bool {
	u := -2.0 // this chunk's draw of the jitter, in [-1, 1) once drawn
	for {
		v := t.f.view()
		switch {
		case v.cut != st.cut:
			cut(stub)
			return false
		case v.stall:
			return true
		case v.reset:
			tm := time.NewTimer(v.after)
			select {
			case <-tm.C:
			case <-stub.Interrupt:
				tm.Stop()
			}
			cut(stub)
			return false
		}
		if v.delay != 0 || v.jitter != 0 {
			if u < -1 {
				u = 2*rand.Float64() - 1
			}
			if wait := time.Until(c.Timestamp.Add(v.delay + time.Duration(u*float64(v.jitter)))); wait > 0 {
				tm := time.NewTimer(wait)
				select {
				case <-tm.C:
				case <-v.changed:
					tm.Stop()
					continue
				case <-stub.Interrupt:
					tm.Stop()
					st.pending = c
					return false
				}
			}
		}
		select {
		case stub.Output <- c:
			return true
		case <-v.changed:
		case <-stub.Interrupt:
			st.pending = c
			return false
		}
	}
}

// cut closes the connection: the stub's end of the chain closes, the link's
// writer closes its side, and toxiproxy closes the other; what still comes in
// is read and dropped until the link's reader ends, so nothing before this
// toxic is left blocked.
func cut(stub *toxics.ToxicStub) {
	stub.Close()
	drain(stub)
}

func drain(stub *toxics.ToxicStub) {
	for {
		select {
		case c := <-stub.Input:
			if c == nil {
				return
			}
		case <-stub.Interrupt:
			return
		}
	}
}
