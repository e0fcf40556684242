package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/masterlist"
)

// Environment variables read when the matching flag is not given.
const (
	envMasters  = "REDLOCK_MASTERS"
	envPassword = "REDLOCK_PASSWORD"
)

// dialTimeout bounds connecting to one master. The lock operations have
// their own, shorter bound (the node timeout); this one only keeps a
// blackholed master from holding redlock's exit for long.
const dialTimeout = 2 * time.Second

// connFlags are the flags that say how to reach the masters, shared by
// every subcommand.
type connFlags struct {
	masters     string
	prefix      string
	nodeTimeout time.Duration
	user        string
	password    string
	tls         bool
	tlsCA       string
	tlsCert     string
	tlsKey      string
	tlsInsecure bool
}

func (cf *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&cf.masters, "masters", "", "comma-separated masters: host:port, redis://[user:password@]host:port[/db] or rediss://...; one means a single-instance lock, several the Redlock quorum (default $"+envMasters+")")
	fs.StringVar(&cf.prefix, "prefix", "", "prefix put before the key in Redis")
	fs.DurationVar(&cf.nodeTimeout, "node-timeout", 0, "bound of one request to one master (at least 20ms; default ttl/10, at least 20ms, at most 500ms)")
	fs.StringVar(&cf.user, "user", "", "ACL user name, for masters whose URL names none")
	fs.StringVar(&cf.password, "password", "", "password, for masters whose URL has none (default $"+envPassword+"; prefer the variable: flags show in ps)")
	fs.BoolVar(&cf.tls, "tls", false, "connect with TLS to every master (rediss:// URLs always do)")
	fs.StringVar(&cf.tlsCA, "tls-ca", "", "PEM file of the CA certificates that verify the masters (default: the system's)")
	fs.StringVar(&cf.tlsCert, "tls-cert", "", "PEM file of the client certificate (with --tls-key)")
	fs.StringVar(&cf.tlsKey, "tls-key", "", "PEM file of the client certificate's private key (with --tls-cert)")
	fs.BoolVar(&cf.tlsInsecure, "tls-insecure", false, "do not verify the masters' certificates (testing only)")
}

// A usageError is a bad flag or argument: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// options returns one go-redis Options per master, validated; the flags
// and the environment (getenv) decide. Errors are usage errors that name
// the flag.
func (cf *connFlags) options(getenv func(string) string) ([]*redis.Options, error) {
	list := cf.masters
	if list == "" {
		list = getenv(envMasters)
	}
	if strings.TrimSpace(list) == "" {
		return nil, usagef("--masters is required (or set $%s)", envMasters)
	}
	if cf.nodeTimeout < 0 {
		return nil, usagef("--node-timeout must be > 0, got %v", cf.nodeTimeout)
	}
	if (cf.tlsCert == "") != (cf.tlsKey == "") {
		return nil, usagef("--tls-cert and --tls-key go together")
	}
	password := cf.password
	if password == "" {
		password = getenv(envPassword)
	}
	base, err := cf.tlsConfig()
	if err != nil {
		return nil, err
	}
	var opts []*redis.Options
	seen := map[string]bool{}
	anyTLS := false
	specs, err := masterlist.Split(list)
	if err != nil {
		return nil, usagef("--masters: %v", err)
	}
	for i, spec := range specs {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			return nil, usagef("--masters: master %d of the list is empty", i+1)
		}
		o, err := parseMaster(spec)
		if err != nil {
			return nil, usagef("--masters: %v", err)
		}
		id := o.Network + " " + o.Addr
		if seen[id] {
			return nil, usagef("--masters: %s is listed twice (every master must be a distinct server)", o.Addr)
		}
		seen[id] = true
		if o.Username == "" {
			o.Username = cf.user
		}
		if o.Password == "" {
			o.Password = password
		}
		if cf.tls && o.TLSConfig == nil {
			o.TLSConfig = &tls.Config{}
		}
		if o.TLSConfig != nil {
			anyTLS = true
			o.TLSConfig = mergeTLS(o.TLSConfig, base, o.Addr)
			o.Dialer = dialTLS(o.TLSConfig)
		}
		// The library bounds every request by the node timeout through the
		// context's deadline and makes its own retries: go-redis must honour
		// the deadline and not retry behind its back.
		o.ContextTimeoutEnabled = true
		o.MaxRetries = -1
		o.DialTimeout = dialTimeout
		o.DialerRetries = 1
		o.PoolSize = 4
		if o.ClientName == "" {
			o.ClientName = "redlock" // in CLIENT LIST
		}
		opts = append(opts, o)
	}
	if !anyTLS {
		for _, f := range []struct {
			name string
			set  bool
		}{{"--tls-ca", cf.tlsCA != ""}, {"--tls-cert", cf.tlsCert != ""}, {"--tls-insecure", cf.tlsInsecure}} {
			if f.set {
				return nil, usagef("%s needs --tls or rediss:// masters", f.name)
			}
		}
	}
	return opts, nil
}

// parseMaster reads one master: a URL (redis://, rediss://, unix://) or
// host[:port], with the library's rules and its secret-free errors.
func parseMaster(spec string) (*redis.Options, error) {
	o, err := redlock.MasterOptions(spec)
	if err != nil {
		return nil, errors.New(strings.TrimPrefix(errText(err), "invalid argument: "))
	}
	return o, nil
}

// tlsConfig builds the TLS settings the flags give, common to every TLS
// master.
func (cf *connFlags) tlsConfig() (*tls.Config, error) {
	c := &tls.Config{InsecureSkipVerify: cf.tlsInsecure}
	if cf.tlsCA != "" {
		pem, err := os.ReadFile(cf.tlsCA)
		if err != nil {
			return nil, usagef("--tls-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usagef("--tls-ca: no PEM certificate in %s", cf.tlsCA)
		}
		c.RootCAs = pool
	}
	if cf.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(cf.tlsCert, cf.tlsKey)
		if err != nil {
			return nil, usagef("--tls-cert/--tls-key: %v", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// mergeTLS returns the master's TLS config: what its URL said, with the
// flags' CA, certificate and verification setting, and the host name to
// verify.
func mergeTLS(own, base *tls.Config, addr string) *tls.Config {
	c := own.Clone()
	if base.RootCAs != nil {
		c.RootCAs = base.RootCAs
	}
	if len(base.Certificates) > 0 {
		c.Certificates = base.Certificates
	}
	if base.InsecureSkipVerify {
		c.InsecureSkipVerify = true
	}
	if c.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			c.ServerName = host
		}
	}
	return c
}

// dial makes one client per master and pings them all at once, so the
// first lock request does not pay for the connection (the node timeout is
// short); it returns each ping's error. A master that does not answer is
// not an error here: the quorum may do without it, and the lock's error
// names it. When ctx ends first, dial returns at once, without the errors:
// a ping waiting for a reply ends only at its deadline.
func dial(ctx context.Context, opts []*redis.Options) ([]*redis.Client, []error) {
	clients := make([]*redis.Client, len(opts))
	for i, o := range opts {
		clients[i] = redis.NewClient(o)
	}
	pctx, cancel := context.WithTimeout(ctx, dialTimeout)
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() { errs[i] = c.Ping(pctx).Err() })
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		cancel()
		close(done)
	}()
	select {
	case <-done:
		return clients, errs
	case <-ctx.Done():
		return clients, nil
	}
}

// probeAfter is how long a TLS handshake may go unanswered before redlock
// asks the master, on a connection of its own, whether it speaks plain
// RESP: a plaintext Redis takes the TLS greeting for the start of a
// command line and waits, silent, for the rest.
const probeAfter = 200 * time.Millisecond

// errPlaintext is a master that answers plaintext RESP to a TLS client.
var errPlaintext = errors.New("answers in plaintext, not TLS (drop --tls for it, or write redis:// rather than rediss://)")

// dialTLS returns a go-redis dialer for a TLS master that honours the
// context during the handshake too, and fails with errPlaintext, soon,
// against a plaintext server.
func dialTLS(cfg *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: dialTimeout}
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		conn := tls.Client(raw, cfg)
		hs := make(chan error, 1)
		go func() { hs <- conn.HandshakeContext(ctx) }()
		probe := time.NewTimer(probeAfter)
		defer probe.Stop()
		var plain chan bool
		for {
			select {
			case err := <-hs:
				if err != nil {
					raw.Close()
					return nil, err
				}
				return conn, nil
			case <-probe.C:
				plain = make(chan bool, 1)
				go func() { plain <- speaksPlain(ctx, network, addr) }()
			case p := <-plain:
				plain = nil
				if p {
					raw.Close()
					<-hs
					return nil, errPlaintext
				}
			}
		}
	}
}

// speaksPlain reports whether addr answers a plaintext PING in RESP (a
// reply or an error, such as NOAUTH). A TLS server closes the connection
// or answers with a TLS alert.
func speaksPlain(ctx context.Context, network, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return false
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return false
	}
	return b[0] == '+' || b[0] == '-'
}

func closeAll(clients []*redis.Client) {
	for _, c := range clients {
		_ = c.Close()
	}
}
