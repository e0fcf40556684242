package chaos

import (
	"bufio"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// echo serves line echo on loopback until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					s, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(s))
				}
			}()
		}
	}()
	return l.Addr().String()
}

// roundTrip sends one line and waits for it back, within d.
func roundTrip(addr string, d time.Duration) (time.Duration, error) {
	c, err := net.DialTimeout("tcp", addr, d)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(d))
	t0 := time.Now()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	_, err = bufio.NewReader(c).ReadString('\n')
	return time.Since(t0), err
}

func TestNetToxics(t *testing.T) {
	n := NewNet()
	defer n.Close()
	if _, err := n.Proxy("far", "redis.example:6379"); err == nil {
		t.Error("a proxy to a non-loopback upstream was allowed")
	}
	p, err := n.Proxy("m0", echo(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(p.Addr(), time.Second); err != nil {
		t.Fatalf("healthy proxy: %v", err)
	}
	if err := p.Latency(100*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	if d, err := roundTrip(p.Addr(), time.Second); err != nil || d < 90*time.Millisecond {
		t.Errorf("latency 100ms: round trip %v, err %v", d, err)
	}
	p.Heal()
	for _, hole := range []func() error{p.BlackholeUp, p.BlackholeDown} {
		if err := hole(); err != nil {
			t.Fatal(err)
		}
		if _, err := roundTrip(p.Addr(), 200*time.Millisecond); err == nil {
			t.Error("a round trip went through a blackhole")
		}
		p.Heal()
	}
	if _, err := roundTrip(p.Addr(), time.Second); err != nil {
		t.Errorf("after Heal: %v", err)
	}
	p.Refuse()
	if _, err := roundTrip(p.Addr(), 200*time.Millisecond); err == nil {
		t.Error("a refused proxy accepted a connection")
	}
	if err := p.Accept(); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(p.Addr(), time.Second); err != nil {
		t.Errorf("after Accept: %v", err)
	}
}

// TestNetWindows checks the per-direction faults the adversary toggles: each
// toxic comes off on its own, a stall ends by closing the connection, and
// Drop cuts a live connection mid-stream.
func TestNetWindows(t *testing.T) {
	n := NewNet()
	defer n.Close()
	p, err := n.Proxy("m0", echo(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []Direction{Up, Down} {
		x, err := p.Delay(dir, 80*time.Millisecond, 0)
		if err != nil {
			t.Fatal(err)
		}
		y, err := p.Delay(dir, 0, 0) // a second toxic on the same stream
		if err != nil {
			t.Fatal(err)
		}
		if d, err := roundTrip(p.Addr(), time.Second); err != nil || d < 70*time.Millisecond {
			t.Errorf("delay %s 80ms: round trip %v, err %v", dir, d, err)
		}
		if err := x.Remove(); err != nil {
			t.Fatal(err)
		}
		if d, err := roundTrip(p.Addr(), time.Second); err != nil || d > 60*time.Millisecond {
			t.Errorf("delay %s removed: round trip %v, err %v", dir, d, err)
		}
		if err := y.Remove(); err != nil {
			t.Fatal(err)
		}
		if y.Remove() == nil {
			t.Errorf("removing a toxic twice succeeded")
		}
	}

	// A stall on one live connection: nothing comes back; Remove closes it.
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	c.Write([]byte("a\n"))
	c.SetDeadline(time.Now().Add(time.Second))
	if s, err := r.ReadString('\n'); err != nil || s != "a\n" {
		t.Fatalf("before the stall: %q %v", s, err)
	}
	x, err := p.Stall(Down)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("b\n"))
	c.SetDeadline(time.Now().Add(100 * time.Millisecond))
	if s, err := r.ReadString('\n'); err == nil {
		t.Errorf("a reply %q came through a downstream stall", s)
	}
	if err := x.Remove(); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(time.Second))
	if s, err := r.ReadString('\n'); err == nil {
		t.Errorf("the stalled connection still carried %q after Remove", s)
	}
	if _, err := roundTrip(p.Addr(), time.Second); err != nil {
		t.Errorf("a new connection after the stall: %v", err)
	}

	// Drop: a live connection is cut, a new one works.
	c2, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	r2 := bufio.NewReader(c2)
	c2.Write([]byte("c\n"))
	c2.SetDeadline(time.Now().Add(time.Second))
	if _, err := r2.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := p.Drop(); err != nil {
		t.Fatal(err)
	}
	c2.Write([]byte("d\n"))
	if s, err := r2.ReadString('\n'); err == nil {
		t.Errorf("a dropped connection still carried %q", s)
	}
	if _, err := roundTrip(p.Addr(), time.Second); err != nil {
		t.Errorf("after Drop: %v", err)
	}

	// Reset: connections that carry data are reset.
	x, err = p.Reset(Up, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(p.Addr(), 300*time.Millisecond); err == nil {
		t.Error("a round trip went through reset_peer")
	}
	x.Remove()
	if _, err := roundTrip(p.Addr(), time.Second); err != nil {
		t.Errorf("after the reset window: %v", err)
	}
}

// TestToxicChangesUnderTrafficAlwaysReturn opens and closes many fault
// windows at once on one proxy, in both directions, while clients send,
// read, hang up mid-reply and get cut: every change (Delay, Stall, Reset,
// their Remove, Drop, Heal) must return within a bound, and the proxy must
// carry traffic afterwards. A change that never returns hangs the suite
// (the adversary's scheduler waits for its windows).
func TestToxicChangesUnderTrafficAlwaysReturn(t *testing.T) {
	// Delays and Drop alone; then every kind of change.
	t.Run("delays", func(t *testing.T) { toxicChangesUnderTraffic(t, 2) })
	t.Run("all", func(t *testing.T) { toxicChangesUnderTraffic(t, 9) })
}

// toxicChangesUnderTraffic runs TestToxicChangesUnderTrafficAlwaysReturn
// with the first kinds of change in {Delay, Drop, Delay, Delay, Stall, Stall,
// Reset, Heal, Delay}.
func toxicChangesUnderTraffic(t *testing.T, kinds int) {
	n := NewNet()
	p, err := n.Proxy("m0", echo(t))
	if err != nil {
		t.Fatal(err)
	}
	const (
		run   = 1500 * time.Millisecond
		bound = 20 * time.Second // a change that takes this long is wedged
	)
	stop := make(chan struct{})
	var traffic sync.WaitGroup
	for i := range 8 {
		traffic.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			line := []byte(strings.Repeat("x", 4000) + "\n")
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", p.Addr(), 200*time.Millisecond)
				if err != nil {
					time.Sleep(time.Millisecond)
					continue
				}
				c.SetDeadline(time.Now().Add(time.Duration(rng.IntN(60)) * time.Millisecond))
				r := bufio.NewReader(c)
				for range 1 + rng.IntN(8) {
					if _, err := c.Write(line); err != nil {
						break
					}
					if rng.IntN(2) == 0 {
						if _, err := r.ReadString('\n'); err != nil {
							break
						}
					}
				}
				if rng.IntN(3) == 0 {
					c.(*net.TCPConn).SetLinger(0) // hang up with a reset
				}
				c.Close()
			}
		})
	}

	var changes sync.WaitGroup
	var done atomic.Int64
	for i := range 6 {
		changes.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 2))
			dirs := []Direction{Up, Down}
			for t0 := time.Now(); time.Since(t0) < run; {
				var x *Toxic
				var err error
				switch rng.IntN(kinds) {
				case 0, 2, 3, 8:
					x, err = p.Delay(dirs[rng.IntN(2)], time.Duration(1+rng.IntN(80))*time.Millisecond, time.Duration(rng.IntN(20))*time.Millisecond)
				case 1:
					if rng.IntN(2) == 0 {
						p.Drop()
					}
				case 4, 5:
					x, err = p.Stall(dirs[rng.IntN(2)])
				case 6:
					x, err = p.Reset(Up, time.Duration(rng.IntN(20))*time.Millisecond)
				case 7:
					if rng.IntN(4) == 0 {
						p.Heal()
					}
				}
				time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
				if err == nil && x != nil {
					x.Remove()
				}
				done.Add(1)
			}
		})
	}
	finished := make(chan struct{})
	go func() {
		changes.Wait()
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(run + bound):
		close(stop)
		// The wedged change holds toxiproxy's lock: closing the proxy would
		// hang too, so leave it.
		t.Fatalf("toxic changes still running %v after their last start (%d done): toxiproxy wedged, and the harness did not free it",
			bound, done.Load())
	}
	close(stop)
	traffic.Wait()
	defer n.Close()
	p.Heal()
	if _, err := roundTrip(p.Addr(), 2*time.Second); err != nil {
		t.Errorf("after %d toxic changes and Heal, a round trip failed: %v", done.Load(), err)
	}
	t.Logf("%d toxic changes, %d unsticks", done.Load(), p.Unsticks())
}
