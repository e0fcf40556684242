package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestUsage(t *testing.T) {
	getenv := func(string) string { return "" }
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // a substring, when not ""
		stderr string
	}{
		{nil, exitUsage, "", "Usage:"},
		{[]string{"--help"}, 0, "Exit status of 'redlock run'", ""},
		{[]string{"help", "status"}, 0, "Usage: redlock status", ""},
		{[]string{"run", "--help"}, 0, "-grace", ""},
		{[]string{"run", "-h"}, 0, "Usage: redlock run", ""},
		{[]string{"status", "--help"}, 0, "-prefix", ""},
		{[]string{"lock"}, exitUsage, "", `unknown command "lock"`},
		{[]string{"run", "--ttl", "30"}, exitUsage, "", "-ttl"},
		{[]string{"run", "--ttl", "-1s", "--key", "k", "--", "true"}, exitUsage, "", "--ttl"},
		{[]string{"run", "--wait", "soon"}, exitUsage, "", "-wait"},
		{[]string{"run", "--bogus"}, exitUsage, "", "-bogus"},
		{[]string{"run", "--fencing=maybe"}, exitUsage, "", "-fencing"},
		{[]string{"run", "--masters", "h:1", "--", "true"}, exitUsage, "", "--key"},
		{[]string{"run", "--masters", "h:1", "--key", "k"}, exitUsage, "", "no command"},
		{[]string{"run", "--masters", "h:1", "--key", "k", "--ttl", "10s", "--grace", "5001ms", "--", "true"}, exitUsage, "", "--grace"},
		{[]string{"run", "--masters", "h:1", "--key", "k", "--grace", "-1s", "--", "true"}, exitUsage, "", "--grace"},
		{[]string{"run", "--key", "k", "--", "true"}, exitUsage, "", "--masters"},
		{[]string{"run", "--masters", "h:1,h:1", "--key", "k", "--", "true"}, exitUsage, "", "listed twice"},
		{[]string{"run", "--masters", "h:1,,h:2", "--key", "k", "--", "true"}, exitUsage, "", "--masters"},
		{[]string{"run", "--masters", "redis://u:pw@h:1/x", "--key", "k", "--", "true"}, exitUsage, "", "--masters"},
		{[]string{"run", "--masters", "h:1", "--tls-ca", "ca.pem", "--key", "k", "--", "true"}, exitUsage, "", "--tls-ca"},
		{[]string{"run", "--masters", "h:1", "--tls", "--tls-ca", "/nonexistent.pem", "--key", "k", "--", "true"}, exitUsage, "", "--tls-ca"},
		{[]string{"run", "--masters", "h:1", "--tls", "--tls-cert", "c.pem", "--key", "k", "--", "true"}, exitUsage, "", "--tls-key"},
		{[]string{"run", "--masters", "h:1", "--key", "k", "--holder-info", strings.Repeat("x", 257), "--", "true"}, exitUsage, "", "--holder-info is 257 bytes, more than the limit of 256"},
		{[]string{"run", "--help"}, 0, "-holder-info", ""},
		{[]string{"status", "--masters", "h:1"}, exitUsage, "", "--key"},
		{[]string{"status", "--masters", "h:1", "--key", "k", "extra"}, exitUsage, "", "unexpected argument"},
		{[]string{"status", "--node-timeout", "x"}, exitUsage, "", "-node-timeout"},
	} {
		var stdout, stderr bytes.Buffer
		code := cli(tc.args, getenv, &stdout, &stderr)
		if code != tc.code {
			t.Errorf("%q: exit %d, want %d; stderr: %s", tc.args, code, tc.code, stderr.String())
		}
		if !strings.Contains(stdout.String(), tc.stdout) {
			t.Errorf("%q: stdout lacks %q:\n%s", tc.args, tc.stdout, stdout.String())
		}
		if !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("%q: stderr lacks %q:\n%s", tc.args, tc.stderr, stderr.String())
		}
		if strings.Contains(stderr.String(), "pw@") {
			t.Errorf("%q: stderr shows a password: %s", tc.args, stderr.String())
		}
	}
}

func TestDefaultGrace(t *testing.T) {
	for ttl, want := range map[time.Duration]time.Duration{
		3 * time.Second:  time.Second,
		30 * time.Second: 10 * time.Second,
		time.Hour:        10 * time.Second,
	} {
		if got := defaultGrace(ttl); got != want {
			t.Errorf("defaultGrace(%v) = %v, want %v", ttl, got, want)
		}
	}
}

// The default holder info names the host, redlock's pid and the
// command's base name, cut to the library's limit at a character's start;
// a host whose name is unknown is left out.
func TestDefaultHolderInfo(t *testing.T) {
	if got, want := defaultHolderInfo("web-1", 42, "/usr/local/bin/report.sh"), "host=web-1 pid=42 cmd=report.sh"; got != want {
		t.Errorf("defaultHolderInfo = %q, want %q", got, want)
	}
	if got, want := defaultHolderInfo("", 42, "./job"), "pid=42 cmd=job"; got != want {
		t.Errorf("defaultHolderInfo without a host = %q, want %q", got, want)
	}
	long := defaultHolderInfo(strings.Repeat("h", 64), 4194304, strings.Repeat("é", 127)) // 255 bytes of name
	if len(long) > 256 || len(long) < 255 || !utf8.ValidString(long) || !strings.HasPrefix(long, "host="+strings.Repeat("h", 64)+" pid=4194304 cmd=éé") {
		t.Errorf("defaultHolderInfo of a long name = %q (%d bytes), want it cut to at most 256 bytes of valid UTF-8", long, len(long))
	}
}

func TestOptions(t *testing.T) {
	env := map[string]string{envMasters: "a:1, redis://bob:pw@b:2/3 ,rediss://c:3,d", envPassword: "envpw"}
	cf := connFlags{user: "alice", tlsInsecure: true}
	opts, err := cf.options(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		addr, user, password string
		db                   int
		tls                  bool
	}
	wants := []want{
		{"a:1", "alice", "envpw", 0, false},
		{"b:2", "bob", "pw", 3, false},
		{"c:3", "alice", "envpw", 0, true},
		{"d:6379", "alice", "envpw", 0, false},
	}
	if len(opts) != len(wants) {
		t.Fatalf("got %d masters, want %d", len(opts), len(wants))
	}
	for i, w := range wants {
		o := opts[i]
		got := want{o.Addr, o.Username, o.Password, o.DB, o.TLSConfig != nil}
		if got != w {
			t.Errorf("master %d: got %+v, want %+v", i, got, w)
		}
		if !o.ContextTimeoutEnabled || o.MaxRetries != -1 {
			t.Errorf("master %d: ContextTimeoutEnabled %v MaxRetries %d; want true, -1", i, o.ContextTimeoutEnabled, o.MaxRetries)
		}
	}
	if c := opts[2].TLSConfig; c.ServerName != "c" || !c.InsecureSkipVerify {
		t.Errorf("rediss master: ServerName %q InsecureSkipVerify %v; want c, true", c.ServerName, c.InsecureSkipVerify)
	}

	// --tls turns TLS on everywhere, with each host's name to verify.
	cf = connFlags{masters: "a:1,[::1]:2", tls: true}
	opts, err = cf.options(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"a", "::1"} {
		if c := opts[i].TLSConfig; c == nil || c.ServerName != name || c.InsecureSkipVerify {
			t.Errorf("master %d: TLS config %+v, want ServerName %q, verifying", i, c, name)
		}
	}
}
