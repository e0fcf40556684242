package chaos

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// helperEnv selects a worker-subprocess mode of the test binary.
const helperEnv = "CHAOS_HELPER"

// helperMain runs a worker subprocess: mode "holder" takes CHAOS_KEY under
// Do on the masters in CHAOS_ADDRS and works until killed, printing HELD
// when fn starts and LOST if its context ends. It returns the exit code.
func helperMain(mode string) int {
	if mode != "holder" {
		fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
		return 2
	}
	ttl, err := time.ParseDuration(os.Getenv("CHAOS_TTL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var ms []redis.UniversalClient
	for _, a := range strings.Split(os.Getenv("CHAOS_ADDRS"), ",") {
		ms = append(ms, redis.NewClient(clientOpts(a)))
	}
	sub := &subject{mutant: os.Getenv("CHAOS_MUTANT")}
	c, err := sub.locker()(ms, LockConfig{NodeTimeout: nodeTimeout, Prefix: os.Getenv("CHAOS_PREFIX")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	out := bufio.NewWriter(os.Stdout)
	// Bounded: the parent kills us long before this ends.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = c.Do(ctx, os.Getenv("CHAOS_KEY"), ttl, func(ctx context.Context) error {
		fmt.Fprintf(out, "HELD %d\n", time.Now().UnixNano())
		out.Flush()
		<-ctx.Done()
		fmt.Fprintf(out, "LOST %d %v\n", time.Now().UnixNano(), context.Cause(ctx))
		out.Flush()
		return nil
	}, RetryEvery(50*time.Millisecond))
	fmt.Fprintf(out, "DONE %v\n", err)
	out.Flush()
	return 0
}
