package chaos

import (
	"bufio"
	"net"
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
