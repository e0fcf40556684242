package wire

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// TestHashSlot: the slot of a key is Redis's, hash tags included: the
// CRC16 check value, then CLUSTER KEYSLOT on a real cluster node.
func TestHashSlot(t *testing.T) {
	if got := HashSlot("123456789"); got != 0x31C3 {
		t.Fatalf("slot of 123456789 = %#x, want 0x31c3 (CRC16 XMODEM's check value)", got)
	}
	ctx := context.Background()
	rc := redistest.StartCluster(t, 1)
	rdb := redis.NewClient(&redis.Options{Addr: rc.Servers[0].Addr()})
	defer rdb.Close()
	keys := []string{"", "a", "foo", "{user1000}.following", "{user1000}.followers", "foo{}{bar}", "foo{{bar}}zap",
		"foo{bar}{zap}", "{", "}", "{}", "a{b", "a}b{c}", "lock:{account}:a", "\xff\x00\x80", "ключ"}
	for i := range 200 {
		keys = append(keys, fmt.Sprintf("job-%d", i), fmt.Sprintf("x{%d}y", i))
	}
	for _, k := range keys {
		want, err := rdb.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := HashSlot(k); int64(got) != want {
			t.Errorf("slot of %q = %d, want %d", k, got, want)
		}
	}
}
