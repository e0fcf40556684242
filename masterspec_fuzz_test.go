package redlock_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/redlock-go/redlock"
)

// FuzzMasterOptions: whatever a master spec holds, MasterOptions does not
// panic, refuses with ErrInvalidArgument alone, never repeats a password in
// its error (in the URL's user part or its query), and sets MaxRetries -1
// and ContextTimeoutEnabled on what it accepts.
func FuzzMasterOptions(f *testing.F) {
	f.Add("alice", "s3cret", "redis-b:6381", "/2")
	f.Add("", "sec/ret", "host:1", "")
	f.Add("user", "pa%ss", "host:1", "")
	f.Add("x", "topsecret", "[::1", "")
	f.Add("u", "p@q", "h:1", "/0?dial_timeout=1s")
	f.Add("", "p", "h:1", "?protocol=x")
	f.Fuzz(func(t *testing.T, user, password, host, tail string) {
		const marker = "Pw9x" // the password starts with it, and nothing else holds it
		others := user + host + tail
		for _, s := range []string{others, unescaped(others)} {
			if strings.Contains(strings.ToLower(s), "w9x") {
				t.Skip()
			}
		}
		password = marker + password
		for _, spec := range []string{
			"redis://" + user + ":" + password + "@" + host + tail,
			"rediss://" + user + ":" + password + "@" + host + tail,
			"redis://" + host + "?password=" + password,
		} {
			o, err := redlock.MasterOptions(spec)
			if err != nil {
				if !errors.Is(err, redlock.ErrInvalidArgument) {
					t.Errorf("%q: %v, want ErrInvalidArgument", spec, err)
				}
				if strings.Contains(err.Error(), marker) {
					t.Errorf("%q: the error shows the password: %v", spec, err)
				}
				continue
			}
			if o.MaxRetries != -1 || !o.ContextTimeoutEnabled {
				t.Errorf("%q: MaxRetries %d ContextTimeoutEnabled %v, want -1 and true", spec, o.MaxRetries, o.ContextTimeoutEnabled)
			}
		}
	})
}

// unescaped is s with its percent-escapes decoded, where it has valid ones.
func unescaped(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}
