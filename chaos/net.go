package chaos

import (
	"context"
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
	if err := p.Start(); err != nil {
		return nil, err
	}
	p.Lock()
	addr := p.Listen
	p.Unlock()
	px := &Proxy{p: p, name: name, addr: addr}
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
		p.p.Stop()
	}
}

// A Proxy is one client group's view of one master.
type Proxy struct {
	p    *toxiproxy.Proxy
	name string
	addr string

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
	p    *Proxy
	name string
}

// Remove ends the fault. A latency toxic hands on at once what it was
// holding back; a stall closes the connections it held (toxiproxy's timeout
// toxic), and what it swallowed is lost.
func (x *Toxic) Remove() error {
	var err error
	x.p.unstick(func() { err = x.p.p.Toxics.RemoveToxic(context.Background(), x.name) })
	return err
}

// wedged is how long a toxic's add or removal may take before the proxy's
// connections are cut to free it.
const wedged = 2 * time.Second

// unstick runs op, a change of the proxy's toxics. toxiproxy v2.12.0 can
// wedge one: it interrupts each link's chain of toxics in turn, and a
// latency toxic blocked handing a chunk on does not take the interrupt
// until its link's writer moves. If op takes longer than wedged, unstick
// cuts every live connection of the proxy (as Drop does), which closes the
// chains, and waits for op. The proxy's Unsticks counts it.
func (p *Proxy) unstick(op func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		op()
	}()
	select {
	case <-done:
		return
	case <-time.After(wedged):
	}
	p.mu.Lock()
	p.unsticks++
	p.mu.Unlock()
	p.Drop()
	<-done
}

// Unsticks is how many times a wedged toxic change needed the proxy's
// connections cut.
func (p *Proxy) Unsticks() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unsticks
}

func (p *Proxy) add(typ string, dir Direction, attrs string) (*Toxic, error) {
	p.mu.Lock()
	p.n++
	name := fmt.Sprintf("%s_%s_%d", typ, dir, p.n)
	p.mu.Unlock()
	var err error
	p.unstick(func() {
		_, err = p.p.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(
			`{"name":%q,"type":%q,"stream":%q,"toxicity":1.0,"attributes":{%s}}`, name, typ, dir, attrs)))
	})
	if err != nil {
		return nil, err
	}
	return &Toxic{p: p, name: name}, nil
}

// Delay holds back every chunk travelling in dir by d ± jitter (toxiproxy's
// latency toxic, in whole milliseconds). Order on one connection is kept;
// with jitter, chunks on two connections of the group can overtake each
// other. New connections pay it on their handshake too.
func (p *Proxy) Delay(dir Direction, d, jitter time.Duration) (*Toxic, error) {
	return p.add("latency", dir, fmt.Sprintf(`"latency":%d,"jitter":%d`, d.Milliseconds(), jitter.Milliseconds()))
}

// Stall swallows everything travelling in dir until Remove, which closes
// the connections: Up, commands never reach Redis; Down, they run and the
// client never hears back.
func (p *Proxy) Stall(dir Direction) (*Toxic, error) { return p.add("timeout", dir, `"timeout":0`) }

// Reset resets (RST) every connection that carries data in dir, after d,
// until Remove.
func (p *Proxy) Reset(dir Direction, d time.Duration) (*Toxic, error) {
	return p.add("reset_peer", dir, fmt.Sprintf(`"timeout":%d`, d.Milliseconds()))
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
func (p *Proxy) Heal() { p.unstick(func() { p.p.Toxics.ResetToxics(context.Background()) }) }

// Refuse closes the listener and every live connection: clients get
// "connection refused" until Accept.
func (p *Proxy) Refuse() { p.p.Stop() }

// Accept listens again on the same address.
func (p *Proxy) Accept() error {
	err := p.p.Start()
	if err == toxiproxy.ErrProxyAlreadyStarted {
		return nil
	}
	return err
}
