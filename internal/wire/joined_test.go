package wire

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/scripts"
)

// TestExtendBatchAnswersAsExtendDoes: a batch of Extends of plain keys, in
// every state extend.lua tells apart, and with a Release and an Extend of
// one key in between, answers each request as sending each alone does,
// leaves every key as that does, and reaches the master as few calls.
func TestExtendBatchAnswersAsExtendDoes(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Clients(t, redistest.Start(t, 1))[0].(*redis.Client)
	m := newMaster(t, rdb, Config{})
	now := time.Now()
	past, future := now.Add(-time.Second).UnixMilli(), now.Add(time.Minute).UnixMilli()
	const ttl = 60000
	type key struct {
		name, value string // value "": absent; "hash": not a string
	}
	keys := []key{
		{"ours", "tok"}, {"ours-past", "tok"}, {"ours-retake-past", "tok"}, {"ours-no-valid", "tok"},
		{"marked", "tok!abcdefgh"}, {"vanished", ""}, {"vanished-past", ""}, {"another", "other"},
		{"a-hash", "hash"}, {"released", "tok"}, {"last", "tok"},
	}
	ext := func(k string, retake, valid int64) Op {
		return Extend(NewTarget(k, "", "tok"), int64(ttl), 0, Bounds{RetakeBy: retake, ValidBy: valid})
	}
	ops := []Op{
		ext("ours", future, future),
		ext("ours-past", future, past),
		ext("ours-retake-past", past, future),
		ext("ours-no-valid", past, 0),
		ext("marked", future, future),
		ext("vanished", future, future),
		ext("vanished-past", past, future),
		ext("another", future, future),
		ext("a-hash", future, future),
		ext("released", future, future),
		Release(NewTarget("released", "", "tok"), nil, ReleaseFacts{}),
		ext("released", future, future), // after its Release: re-takes
		ext("last", future, future),
	}
	setUp := func() {
		t.Helper()
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			var err error
			switch k.value {
			case "":
			case "hash":
				err = rdb.HSet(ctx, k.name, "f", "v").Err()
			default:
				err = rdb.Set(ctx, k.name, k.value, 10*time.Second).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// state is what the keys hold after, and whether each lasts the TTL.
	state := func() string {
		t.Helper()
		var b strings.Builder
		for _, k := range keys {
			v, _ := rdb.Get(ctx, k.name).Result()
			fmt.Fprintf(&b, "%s=%q renewed=%v; ", k.name, v, rdb.PTTL(ctx, k.name).Val() > 50*time.Second)
		}
		return b.String()
	}
	answer := func(r Reply) string {
		if r.Err != nil {
			// A script's error names the script where it was raised.
			msg, _, _ := strings.Cut(r.Err.Error(), " script: ")
			return msg
		}
		return strconv.FormatInt(r.Val, 10)
	}

	setUp()
	var alone []string
	for _, o := range ops {
		alone = append(alone, answer(execBatchReplies(t, m, []Op{o})[0]))
	}
	aloneState := state()

	setUp()
	calls := evalshaCalls(t, rdb)
	replies := execBatchReplies(t, m, ops)
	if n := evalshaCalls(t, rdb) - calls; n != 3 {
		// the Extends before the Release, the Release, the two Extends after
		t.Errorf("the batch reached the master as %d EVALSHA calls, want 3", n)
	}
	for i, r := range replies {
		if got := answer(r); got != alone[i] {
			t.Errorf("request %d: %s in a batch, %s alone", i, got, alone[i])
		}
	}
	if got := state(); got != aloneState {
		t.Errorf("keys after the batch:\n  %s\nafter each alone:\n  %s", got, aloneState)
	}
	// The states the cases were written for.
	want := []string{"1", "past", "1", "past", "1", "2", "absent", "another owner", "WRONGTYPE", "1", "", "2", "1"}
	for i, w := range want {
		if !strings.Contains(strings.ToLower(alone[i]), strings.ToLower(w)) && !(w == "" && alone[i] == "0") {
			t.Errorf("request %d alone: %s, want %q in it", i, alone[i], w)
		}
	}
}

// TestJoinedExtendsAfterAScriptFlush: a batch of Extends sent as one call
// to a master that lost its scripts is sent again, alone, after the
// scripts are loaded, and every Extend is answered.
func TestJoinedExtendsAfterAScriptFlush(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Clients(t, redistest.Start(t, 1))[0].(*redis.Client)
	m := newMaster(t, rdb, Config{})
	var ops []Op
	for i := range 5 {
		k := "k" + strconv.Itoa(i)
		if err := rdb.Set(ctx, k, "tok", 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		ops = append(ops, testOp(KindExtend, k, "", "tok", 60000))
	}
	for i, err := range execBatch(t, m, ops) { // loads the scripts
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	calls := evalshaCalls(t, rdb)
	for i, err := range execBatch(t, m, ops) {
		if err != nil {
			t.Errorf("request %d after the flush: %v", i, err)
		}
	}
	if n := evalshaCalls(t, rdb) - calls; n != 1+len(ops) {
		t.Errorf("%d EVALSHA calls, want %d: the join refused, then each Extend alone, after the scripts", n, 1+len(ops))
	}
}

// evalshaCalls is how many EVALSHA calls the master ran (INFO commandstats).
func evalshaCalls(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(info, "cmdstat_evalsha:calls=")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAJoinsKeyErrorsLeaveTheConnectionInStep: a join whose keys each get
// an error reply of their own (a master with too few replicas to write, a
// master out of memory for a re-take) answers each Extend with it, and the
// requests that follow on the same connection read their own replies: an
// Acquire of a key another owner holds is refused.
func TestAJoinsKeyErrorsLeaveTheConnectionInStep(t *testing.T) {
	for _, tc := range []struct {
		name    string
		keys    []string
		on, off [][2]string
		want    string
	}{
		{"too few replicas", []string{"k1", "k2", "k3"}, [][2]string{{"min-replicas-to-write", "1"}}, [][2]string{{"min-replicas-to-write", "0"}}, "NOREPLICAS"},
		{"out of memory", []string{"gone", "k1", "k2"}, [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}}, [][2]string{{"maxmemory", "0"}}, "OOM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := redistest.Clients(t, redistest.Start(t, 1))[0].(*redis.Client)
			m := newMaster(t, rdb, Config{})
			for _, k := range []string{"k1", "k2", "k3"} {
				if err := rdb.Set(ctx, k, "tok", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if err := rdb.Set(ctx, "held", "other", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			ext := func(k string) Op { return testOp(KindExtend, k, "", "tok", 60000) }
			execBatch(t, m, []Op{ext("k1"), ext("k2")}) // the scripts loaded, the connection held
			config := func(kv [][2]string) {
				for _, p := range kv {
					if err := rdb.ConfigSet(ctx, p[0], p[1]).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			config(tc.on)
			var ops []Op
			for _, k := range tc.keys {
				ops = append(ops, ext(k))
			}
			got := execBatch(t, m, ops)
			config(tc.off)
			if got[0] == nil || !strings.HasPrefix(got[0].Error(), tc.want) {
				t.Errorf("the first Extend of the join: %v, want %s", got[0], tc.want)
			}
			for _, k := range []string{"free1", "free2"} {
				if err := execBatch(t, m, []Op{Acquire(NewTarget(k, "", "me"), lockTTL, nil)})[0]; err != nil {
					t.Errorf("Acquire of the free key %s after the join: %v", k, err)
				}
			}
			if err := execBatch(t, m, []Op{Acquire(NewTarget("held", "", "me"), lockTTL, nil)})[0]; err != ErrTaken {
				t.Errorf("Acquire of a key another owner holds, after the join: %v, want ErrTaken (it holds %q)", err, rdb.Get(ctx, "held").Val())
			}
		})
	}
}

// TestJoinsGoOnlyToAStandaloneRedis: a master that enforces hash slots on
// every command (a Cluster node reached by a plain client, as a proxy in
// front of shards) is sent each Extend alone, and each is extended.
func TestJoinsGoOnlyToAStandaloneRedis(t *testing.T) {
	cl := redistest.StartCluster(t, 1)
	rdb := cl.Servers[0].Client()
	t.Cleanup(func() { rdb.Close() })
	m := newMaster(t, rdb, Config{})
	ops := heldExtends(t, rdb, "k1", "k2", "k3")
	execBatch(t, m, ops[:1]) // a connection taken: the master's mode known
	extendedAlone(t, m, rdb, ops)
}

// TestAMasterThatRefusesAJoinGetsNoMore: a join the master answers with an
// error of the whole call fails its Extends there, and the next Extends go
// alone, and are extended.
func TestAMasterThatRefusesAJoinGetsNoMore(t *testing.T) {
	rdb := redistest.Clients(t, redistest.Start(t, 1))[0].(*redis.Client)
	rdb.AddHook(refuseJoins{})
	m := newMaster(t, rdb, Config{})
	ops := heldExtends(t, rdb, "k1", "k2", "k3")
	execBatch(t, m, ops[:1]) // a connection taken: the master's mode known
	for i, err := range execBatch(t, m, ops) {
		if err == nil || !strings.HasPrefix(err.Error(), "CROSSSLOT") {
			t.Errorf("Extend %d of the refused join: %v, want CROSSSLOT", i, err)
		}
	}
	extendedAlone(t, m, rdb, ops)
}

// refuseJoins is a go-redis hook that answers every join with CROSSSLOT
// before it reaches the master, as a proxy in front of shards does.
type refuseJoins struct{}

type crossSlot struct{}

func (crossSlot) Error() string { return "CROSSSLOT Keys in request don't hash to the same slot" }
func (crossSlot) RedisError()   {}

func (refuseJoins) DialHook(next redis.DialHook) redis.DialHook { return next }
func (refuseJoins) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (refuseJoins) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var rest []redis.Cmder
		for _, c := range cmds {
			if a := c.Args(); len(a) > 1 && a[1] == scripts.ExtendBatch.SHA {
				c.SetErr(crossSlot{})
				continue
			}
			rest = append(rest, c)
		}
		if len(rest) == 0 {
			return nil
		}
		return next(ctx, rest)
	}
}

// TestAJoinThatFindsItsScriptMissingIsNotRunAfterALaterRelease: a master
// whose script cache holds every script of ours but the join's (another
// process loaded its own after the cache was lost; or a user that may not
// SCRIPT LOAD, whose scripts got there as EVAL) never runs an Extend after
// the Release that followed it in its batch.
func TestAJoinThatFindsItsScriptMissingIsNotRunAfterALaterRelease(t *testing.T) {
	for _, how := range []string{"another process reloaded its own", "SCRIPT denied"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			srv := redistest.Start(t, 1)[0]
			admin := redistest.Clients(t, []*redistest.Server{srv})[0].(*redis.Client)
			rdb := admin
			if how == "SCRIPT denied" {
				if err := admin.Do(ctx, "acl", "setuser", "noload", "on", ">pw", "~*", "&*", "+@all", "-script").Err(); err != nil {
					t.Fatal(err)
				}
				rdb = srv.Client(func(o *redis.Options) {
					o.ContextTimeoutEnabled, o.MaxRetries, o.Username, o.Password = true, -1, "noload", "pw"
				})
				t.Cleanup(func() { rdb.Close() })
			}
			m := newMaster(t, rdb, Config{})
			for _, k := range []string{"k", "j"} {
				if err := admin.Set(ctx, k, "tok", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			ext := func(k string) Op { return testOp(KindExtend, k, "", "tok", 60000) }
			execBatch(t, m, []Op{ext("k")})                                                   // a connection; extend.lua and
			execBatch(t, m, []Op{Release(NewTarget("none", "", "tok"), nil, ReleaseFacts{})}) // release.lua cached
			if how == "another process reloaded its own" {
				if err := admin.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				for _, s := range scripts.All {
					if s != &scripts.ExtendBatch {
						if err := admin.ScriptLoad(ctx, s.Src).Err(); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			errs := execBatch(t, m, []Op{ext("k"), ext("j"), Release(NewTarget("k", "", "tok"), nil, ReleaseFacts{})})
			if v, err := admin.Get(ctx, "k").Result(); err != redis.Nil {
				t.Errorf("k after [Extend k, Extend j, Release k] (answered %v): %q, %v, want it gone: an Extend ran after the Release", errs, v, err)
			}
			if errs[2] != nil {
				t.Errorf("the Release: %v", errs[2])
			}
		})
	}
}

// TestAJoinOnADemotedMasterIsRefusedWhole: a join sent to a master that has
// become a replica is answered READONLY for each of its Extends, as each
// alone would be, the connection is given up as it is then, and joins go
// on once the master is a master again.
func TestAJoinOnADemotedMasterIsRefusedWhole(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Clients(t, redistest.Start(t, 1))[0].(*redis.Client)
	m := newMaster(t, rdb, Config{})
	ops := heldExtends(t, rdb, "k1", "k2", "k3")
	execBatch(t, m, ops) // the scripts loaded, the master's mode known
	before := connID(m)
	if err := rdb.ReplicaOf(ctx, "127.0.0.1", "1").Err(); err != nil { // a master that never answers: the data stays
		t.Fatal(err)
	}
	for i, err := range execBatch(t, m, ops) {
		if err == nil || !strings.HasPrefix(err.Error(), "READONLY") {
			t.Errorf("Extend %d on the demoted master: %v, want READONLY", i, err)
		}
	}
	if err := rdb.ReplicaOf(ctx, "no", "one").Err(); err != nil {
		t.Fatal(err)
	}
	if m.st.joins.Load() != joinsAllowed {
		t.Fatalf("joins %d after READONLY, want allowed", m.st.joins.Load())
	}
	// go-redis gave the connection up after the READONLY: the lane's next
	// batch finds it so, and takes another.
	execBatch(t, m, ops)
	calls := evalshaCalls(t, rdb)
	for i, err := range execBatch(t, m, ops) {
		if err != nil {
			t.Errorf("Extend %d on the master again: %v", i, err)
		}
	}
	if n := evalshaCalls(t, rdb) - calls; n != 1 {
		t.Errorf("%d EVALSHA calls for %d Extends on the master again, want one: joins stopped", n, len(ops))
	}
	if connID(m) == before {
		// Where a failover moves the master's name to another server, a
		// kept connection would stay with the replica.
		t.Error("the lane kept the connection that was answered READONLY")
	}
}

// heldExtends sets each of keys to the token "tok" for a minute, and
// returns an Extend of each.
func heldExtends(t *testing.T, rdb redis.Cmdable, keys ...string) []Op {
	t.Helper()
	var ops []Op
	for _, k := range keys {
		if err := rdb.Set(context.Background(), k, "tok", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		ops = append(ops, testOp(KindExtend, k, "", "tok", 60000))
	}
	return ops
}

// extendedAlone runs ops, Extends, as one batch on m, and checks that each
// was extended in a call of its own.
func extendedAlone(t *testing.T, m *Master, rdb *redis.Client, ops []Op) {
	t.Helper()
	calls := evalshaCalls(t, rdb)
	for i, err := range execBatch(t, m, ops) {
		if err != nil {
			t.Errorf("Extend %d: %v", i, err)
		}
	}
	if n := evalshaCalls(t, rdb) - calls; n != len(ops) {
		t.Errorf("%d EVALSHA calls for %d Extends, want one each", n, len(ops))
	}
}
