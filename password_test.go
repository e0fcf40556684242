package redlock_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/masterlist"
)

// A password never shows: not in MasterOptions' errors, not in the redlock
// command's, whatever the spec's shape.

// TestMasterSpecWithoutSchemeLeaksNoPassword: MasterOptions "never repeats
// a password" (its doc), also for a URL's user part typed without its
// scheme ("user:password@host:port", ":password@host:port": a common slip,
// and what `redlock run --masters` gets from a shell variable gone wrong):
// it is refused, or at least never taken as a host name, which would put
// the password in Options.Addr, printed in every NodeError and dial error.
func TestMasterSpecWithoutSchemeLeaksNoPassword(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"locker:s3cret@127.0.0.1:1", ":s3cret@127.0.0.1:1", ":s3cret@localhost"} {
		o, err := redlock.MasterOptions(spec)
		if err != nil {
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("MasterOptions(%q): %v", spec, err)
			}
			continue
		}
		o.DialTimeout = 100 * time.Millisecond
		rdb := redis.NewClient(o)
		c, err := redlock.NewSingle(rdb)
		if err != nil {
			rdb.Close()
			t.Fatal(err)
		}
		_, err = c.Obtain(context.Background(), "k", time.Second)
		c.Close()
		rdb.Close()
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("MasterOptions(%q) took it as the address %q; Obtain then: %v", spec, o.Addr, err)
		}
	}
}

// TestMasterOptionsNeverRepeatsAPassword: "an error never repeats a
// password" (MasterOptions' doc), also for a URL with the password where
// several other clients take it, as a query parameter (refused by
// go-redis, "unexpected option: password"), and for a password holding
// "://" in a spec without a scheme.
func TestMasterOptionsNeverRepeatsAPassword(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{
		"redis://cache.internal:6379/0?password=s3cretpw",
		"rediss://cache.internal:6380?password=s3cretpw&db=1",
		"admin:s3cretpw://x@cache.internal:6379",
	} {
		_, err := redlock.MasterOptions(spec)
		if err == nil {
			t.Errorf("MasterOptions(%q) accepted it", spec)
			continue
		}
		if strings.Contains(err.Error(), "s3cretpw") {
			t.Errorf("MasterOptions(%q): the error repeats the password: %v", spec, err)
		}
	}
}

// TestMasterOptionsNeverRepeatsAPasswordHoldingAnAt: "an error never
// repeats a password: it names the master by its host and port (or socket
// path) alone" (MasterOptions' doc), also when a password passed as a
// query parameter (refused by go-redis, "unexpected option") holds an '@':
// the host is found in the URL's authority only, never after the last '@'
// of the whole spec.
func TestMasterOptionsNeverRepeatsAPasswordHoldingAnAt(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{
		"redis://cache.internal:6379/0?password=abc@s3cretpw",
		"redis://cache.internal:6379?password=s3c@retpw",
	} {
		_, err := redlock.MasterOptions(spec)
		if err == nil {
			t.Errorf("MasterOptions(%q) accepted it", spec)
			continue
		}
		if strings.Contains(err.Error(), "s3cretpw") || strings.Contains(err.Error(), "retpw") {
			t.Errorf("MasterOptions(%q): the error repeats the password: %v", spec, err)
		}
	}
}

// TestMastersListLeaksNoPartOfAPassword: a ',' may stand unencoded in a
// URL's user part (RFC 3986 sub-delims), so "redis://bob:Xq7,Zr9@host:port"
// is a valid URL with the password "Xq7,Zr9". The redlock command's
// --masters list is not split at that ',' into pieces whose errors would
// repeat a part of the password ("invalid port \":Xq7\" after host"): a
// piece that does not parse is named by its position in the list, never by
// its text.
func TestMastersListLeaksNoPartOfAPassword(t *testing.T) {
	t.Parallel()
	bin := redlockBinary(t)
	const password = "Xq7,Zr9"
	out, _ := exec.Command(bin, "status", "--masters", "redis://bob:"+password+"@127.0.0.1:1", "--key", "k").CombinedOutput()
	for _, part := range strings.Split(password, ",") {
		if strings.Contains(string(out), part) {
			t.Fatalf("redlock status with a password holding a ',' repeats %q of it:\n%s", part, out)
		}
	}
}

// TestMastersListKeepsAPasswordWithAnAtWhole: an unencoded '@' in a
// password, or in a user name (an e-mail-like ACL user), looks like the end
// of a user part in the piece before a ',' of the password:
// "redis://ops@corp:Xq7,Zr9@127.0.0.1:1" is, whole, a valid master (user
// "ops@corp", password "Xq7,Zr9"), and split at the ',' its first piece
// would name host "corp" and port "Xq7", a part of the password, in the
// usage error. masterlist.Split refuses any list with a piece that has an
// '@' but no scheme (what a ',' in a user part always leaves), naming it
// by position only: no split can tell such a list from two masters for
// sure. Likewise for the password "Q9@h7:Xq,Zr9".
func TestMastersListKeepsAPasswordWithAnAtWhole(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{
		"redis://ops@corp:Xq7,Zr9@127.0.0.1:1",
		"redis://bob:Q9@h7:Xq,Zr9@127.0.0.1:1",
	} {
		if _, err := redlock.MasterOptions(spec); err != nil {
			t.Fatalf("MasterOptions(%q), whole: %v", spec, err)
		}
		if got, err := masterlist.Split(spec); err == nil {
			t.Errorf("Split(%q) = %q: a master cut at a ',' of its password, without an error", spec, got)
		}
	}
	bin := redlockBinary(t)
	for _, c := range []struct{ spec, secret string }{
		{"redis://ops@corp:Xq7,Zr9@127.0.0.1:1", "Xq7"},
		{"redis://bob:Q9@h7:Xq,Zr9@127.0.0.1:1", "h7:Xq"},
	} {
		out, _ := exec.Command(bin, "status", "--masters", c.spec, "--key", "k", "--node-timeout", "50ms").CombinedOutput()
		if strings.Contains(string(out), c.secret) {
			t.Errorf("redlock status --masters %q repeats %q of its password:\n%s", c.spec, c.secret, out)
		}
	}
}
