package chaos

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Residual is what a scan found: lock keys still present after a run.
type Residual struct {
	Keys    int           // keys with an expiry (lock keys always have one)
	MaxPTTL time.Duration // the longest time left on a key with an expiry
	// NoExpiry counts keys without an expiry: locks that never end.
	NoExpiry int
	Errors   int // scan or PTTL failures
}

// ScanResidual scans every master for keys matching pattern and reports how
// many are left and the largest PTTL.
func ScanResidual(ctx context.Context, masters []redis.UniversalClient, pattern string) (r Residual) {
	for _, m := range masters {
		var cursor uint64
		for range 1000 { // bounded: test keyspaces are small
			keys, next, err := m.Scan(ctx, cursor, pattern, 1000).Result()
			if err != nil {
				r.Errors++
				break
			}
			for _, k := range keys {
				d, err := m.PTTL(ctx, k).Result()
				if err != nil {
					r.Errors++
					continue
				}
				switch {
				case d == -2: // gone meanwhile
				case d < 0: // a fence counter, or a lock that never ends
					r.NoExpiry++
				default:
					r.Keys++
					r.MaxPTTL = max(r.MaxPTTL, d)
				}
			}
			cursor = next
			if cursor == 0 {
				break
			}
		}
	}
	return r
}
