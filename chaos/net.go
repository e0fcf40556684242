package chaos

import (
	"fmt"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Net is an in-process toxiproxy: one proxy per (client group, master), so
// two clients can see different networks ("A reaches {0,1,2}, B all five").
// Methods are safe for concurrent use.
type Net struct {
	srv *toxiproxy.ApiServer

	mu      sync.Mutex
	proxies []*Proxy
}

// NewNet starts an in-process toxiproxy with no HTTP API and no logging.
func NewNet() *Net {
	// Toxics log through zerolog's global logger; keep test output clean.
	zerolog.SetGlobalLevel(zerolog.Disabled)
	return &Net{srv: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())}
}

// Proxy starts a proxy on a free loopback port in front of upstream.
func (n *Net) Proxy(name, upstream string) (*Proxy, error) {
	if !strings.HasPrefix(upstream, "127.0.0.1:") && !strings.HasPrefix(upstream, "localhost:") {
		return nil, fmt.Errorf("chaos: upstream %q is not on loopback", upstream)
	}
	p := toxiproxy.NewProxy(n.srv, name, "127.0.0.1:0", upstream)
	px := &Proxy{p: p, name: name, up: newFaults(), down: newFaults()}
	// The chain is set once, before the first connection, and never changes.
	for dir, f := range map[Direction]*faults{Up: px.up, Down: px.down} {
		w, err := p.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(
			`{"name":"faults_%s","type":%q,"stream":%q,"toxicity":1.0,"attributes":{}}`, dir, faultToxicType, dir)))
		if err != nil {
			return nil, err
		}
		w.Toxic.(*faultToxic).f = f
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	p.Lock()
	px.addr = p.Listen
	p.Unlock()
	n.mu.Lock()
	n.proxies = append(n.proxies, px)
	n.mu.Unlock()
	return px, nil
}

// Close stops every proxy and closes their connections.
func (n *Net) Close() {
	n.mu.Lock()
	ps := n.proxies
	n.proxies = nil
	n.mu.Unlock()
	for _, p := range ps {
		p.Refuse()
	}
}

// A Proxy is one client group's view of one master.
//
// Rules:
//   - toxiproxy's chain of toxics of a proxy never changes once it carries
//     connections: each direction holds one toxic of the suite's own
//     (faultToxic), fixed at creation, and every fault (Delay, Stall, Reset,
//     their Remove, Heal) is a change of that toxic's state. toxiproxy v2.12.0
//     adds and removes a toxic under its collection's lock by interrupting
//     every link's chain, and a latency toxic handing a chunk to a link whose
//     writer has died (its connection closed: a client hanging up, Drop) never
//     takes the interrupt, while that writer waits for the same lock to
//     unregister: the change never returns, and no cut frees it; removing a
//     timeout toxic also leaves its links' chains out of step with the
//     collection, and a later add panics. TestToxicChangesUnderTrafficAlwaysReturn.
//   - faultToxic never blocks without also watching its direction's faults, so a
//     fault's change reaches a chunk it holds at once (a removed delay hands
//     it on, a stall swallows it, a cut closes the connection).
//     TestNetWindows, TestToxicChangesUnderTrafficAlwaysReturn.
//   - Refuse, Accept and Drop, the only toxiproxy calls after creation, run one
//     at a time per proxy and are waited for at most wedged; one that takes
//     longer is left to finish on its own and counted (Unsticks), so the suite
//     never waits on toxiproxy without a bound.
type Proxy struct {
	p        *toxiproxy.Proxy
	name     string
	addr     string
	up, down *faults

	ops sync.Mutex // one toxiproxy call at a time

	mu       sync.Mutex
	n        int // toxic name counter
	unsticks int
}

// Addr is where the group's client connects ("127.0.0.1:PORT"); it stays
// the same across Refuse and Accept.
func (p *Proxy) Addr() string { return p.addr }

// Name is the proxy's name.
func (p *Proxy) Name() string { return p.name }

// A Direction is the way bytes travel through a proxy.
type Direction string

const (
	// Up carries requests, client to master.
	Up Direction = "upstream"
	// Down carries replies, master to client.
	Down Direction = "downstream"
)

// A Toxic is one fault on one proxy, removed on its own with Remove, so
// windows on the same proxy can open and close independently.
type Toxic struct {
	f    *faults
	name string
}

// Remove ends the fault. A delay hands on at once what it was holding back;
// removing a stall closes every live connection of the proxy (as toxiproxy's
// timeout toxic does), and what it swallowed is lost. Removing a fault twice
// is an error.
func (x *Toxic) Remove() error {
	if !x.f.remove(x.name) {
		return fmt.Errorf("chaos: no toxic %s", x.name)
	}
	return nil
}

// wedged is how long a toxiproxy call (Refuse, Accept) may take before the
// harness stops waiting for it.
const wedged = 5 * time.Second

// bounded runs op, a toxiproxy call on the proxy, after the proxy's earlier
// calls, and waits for it at most wedged; a call still running then is left
// to finish on its own, counted in Unsticks, and reported as an error.
func (p *Proxy) bounded(what string, op func() error) error {
	done := make(chan error, 1)
	go func() {
		p.ops.Lock()
		defer p.ops.Unlock()
		done <- op()
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(wedged):
	}
	p.mu.Lock()
	p.unsticks++
	p.mu.Unlock()
	return fmt.Errorf("chaos: proxy %s: toxiproxy did not finish %s within %v", p.name, what, wedged)
}

// Unsticks is how many toxiproxy calls on the proxy did not finish within
// wedged (and were left to finish on their own).
func (p *Proxy) Unsticks() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unsticks
}

func (p *Proxy) add(typ string, dir Direction, fl fault) (*Toxic, error) {
	p.mu.Lock()
	p.n++
	name := fmt.Sprintf("%s_%s_%d", typ, dir, p.n)
	p.mu.Unlock()
	f := p.up
	if dir == Down {
		f = p.down
	} else if dir != Up {
		return nil, fmt.Errorf("chaos: no direction %q", dir)
	}
	f.add(name, fl)
	return &Toxic{f: f, name: name}, nil
}

// Delay holds back every chunk travelling in dir by d ± jitter, counted from
// when the proxy read it (delays on one direction add up). Order on one
// connection is kept; with jitter, chunks on two connections of the group can
// overtake each other. New connections pay it on their handshake too.
func (p *Proxy) Delay(dir Direction, d, jitter time.Duration) (*Toxic, error) {
	return p.add("latency", dir, fault{delay: d, jitter: jitter})
}

// Stall swallows everything travelling in dir until Remove, which closes
// the connections: Up, commands never reach Redis; Down, they run and the
// client never hears back.
func (p *Proxy) Stall(dir Direction) (*Toxic, error) {
	return p.add("timeout", dir, fault{stall: true})
}

// Reset swallows the first chunk a connection carries in dir and closes the
// connection d later (toxiproxy's reset_peer), until Remove.
func (p *Proxy) Reset(dir Direction, d time.Duration) (*Toxic, error) {
	return p.add("reset_peer", dir, fault{reset: true, after: d})
}

// Drop closes every live connection of the group to this master at once
// (the listener closes and opens again on the same address): requests in
// flight are lost mid-stream and the client dials anew.
func (p *Proxy) Drop() error {
	p.Refuse()
	return p.Accept()
}

// Latency delays every reply (downstream) by d ± jitter. It also delays the
// handshake of new connections: warm pools first.
func (p *Proxy) Latency(d, jitter time.Duration) error {
	_, err := p.Delay(Down, d, jitter)
	return err
}

// BlackholeUp drops everything the client sends: commands never reach Redis.
func (p *Proxy) BlackholeUp() error {
	_, err := p.Stall(Up)
	return err
}

// BlackholeDown drops every reply: commands run on Redis, the client never
// hears back (the "reply lost" case).
func (p *Proxy) BlackholeDown() error {
	_, err := p.Stall(Down)
	return err
}

// Heal removes every toxic.
func (p *Proxy) Heal() {
	p.up.clear()
	p.down.clear()
}

// Refuse closes the listener and every live connection: clients get
// "connection refused" until Accept.
func (p *Proxy) Refuse() {
	// Chunks held for connections about to close are let go.
	p.up.cutAll()
	p.down.cutAll()
	p.bounded("Refuse", func() error {
		p.p.Stop()
		return nil
	})
}

// Accept listens again on the same address.
func (p *Proxy) Accept() error {
	return p.bounded("Accept", func() error {
		err := p.p.Start()
		if err == toxiproxy.ErrProxyAlreadyStarted {
			return nil
		}
		return err
	})
}
