//go:build unix

package redistest

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestProxySilenceAtLosesAnAnswerTheServerGave: armed with a word, the
// proxy lets the connection whose server sends it through up to the word,
// then drops everything either way, without closing it: the server runs
// the SUBSCRIBE, the client never reads its confirmation. The next
// connection is not affected.
func TestProxySilenceAtLosesAnAnswerTheServerGave(t *testing.T) {
	s := Start(t, 1)[0]
	p, err := NewProxy(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	direct := s.Client()
	defer direct.Close()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DisableIdentity: true})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil { // the word is armed after: a fresh connection subscribes
		t.Fatal(err)
	}
	p.SilenceAt("Lost-Channel")
	lost := c.Subscribe(ctx)
	defer lost.Close()
	if err := lost.Subscribe(ctx, "lost-channel"); err != nil {
		t.Fatal(err)
	}
	Eventually(t, func() error {
		n, err := direct.PubSubNumSub(ctx, "lost-channel").Result()
		if err != nil || n["lost-channel"] != 1 {
			return errors.New("the server has not run the SUBSCRIBE")
		}
		return nil
	})
	_, err = lost.ReceiveTimeout(ctx, 300*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("reading the confirmation: %v, want a timeout: the answer must be lost, the connection left open", err)
	}
	if n := p.Pending(); n != 0 {
		t.Errorf("Pending %d after the silence", n)
	}
	heard := c.Subscribe(ctx, "heard-channel")
	defer heard.Close()
	msg, err := heard.ReceiveTimeout(ctx, 5*time.Second)
	if err != nil {
		t.Fatalf("a connection after the silence: %v", err)
	}
	if sub, ok := msg.(*redis.Subscription); !ok || sub.Channel != "heard-channel" {
		t.Fatalf("a connection after the silence read %v, want the confirmation of heard-channel", msg)
	}
}
