package redlock

import (
	"errors"
	"net"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// MasterOptions returns go-redis options for one master, read from spec:
// "host:port" ("host" alone means port 6379), or a URL:
// redis://[user:password@]host:port[/db], rediss://... for TLS, or
// unix:///path/to/socket. They are set as the library needs them
// (MaxRetries: -1, ContextTimeoutEnabled: true; see [New]), and with
// go-redis's maintenance notifications off: the node timeout, not timeouts
// relaxed during a server's maintenance, bounds each request, and with
// them on, go-redis v9 clients of servers that refuse the handshake (Redis
// Open Source and miniredis: only Redis Cloud and Redis Software send
// them) race on their own options when two connections dial at once
// (TestMasterOptionsClientsDialAtOnceWithoutARace). Change what else you
// need (TLS settings, pool size, timeouts) before redis.NewClient. An
// error never repeats a password: it names the master by its host and port
// (or socket path) alone.
func MasterOptions(spec string) (*redis.Options, error) {
	o, err := parseMaster(strings.TrimSpace(spec))
	if err != nil {
		return nil, err
	}
	o.MaxRetries = -1
	o.ContextTimeoutEnabled = true
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return o, nil
}

// NewMasters returns a go-redis client per spec (see [MasterOptions]),
// ready for [New] or [NewSingle]. They connect on first use; the caller
// closes them.
func NewMasters(specs ...string) ([]redis.UniversalClient, error) {
	if len(specs) == 0 {
		return nil, invalid("no masters")
	}
	clients := make([]redis.UniversalClient, 0, len(specs))
	for _, spec := range specs {
		o, err := MasterOptions(spec)
		if err != nil {
			for _, c := range clients {
				c.Close()
			}
			return nil, err
		}
		clients = append(clients, redis.NewClient(o))
	}
	return clients, nil
}

func parseMaster(spec string) (*redis.Options, error) {
	if spec == "" {
		return nil, invalid("empty master address")
	}
	if _, rest, ok := strings.Cut(spec, "://"); ok {
		o, err := redis.ParseURL(spec)
		if err == nil {
			return o, nil
		}
		if strings.Contains(rest, "@") {
			// The parser's message may repeat any part of the URL, the
			// password too.
			return nil, invalid("the URL of master %q is not valid (percent-encode a user name or password that holds one of : / ? # [ ] @ %%)", safeName(spec))
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the rest of the message repeats the URL
		}
		return nil, invalid("the URL of master %q is not valid (redis://, rediss:// or unix://): %v", safeName(spec), err)
	}
	if strings.Contains(spec, "@") {
		return nil, invalid("master %q has a user part but no scheme: write redis://user:password@host:port", safeName(spec))
	}
	host, port, err := net.SplitHostPort(spec)
	if err != nil {
		// No port: the Redis default.
		if strings.Contains(spec, "/") || strings.Count(spec, ":") == 1 {
			return nil, invalid("%q is neither host:port nor a redis:// URL", spec)
		}
		host, port = strings.Trim(spec, "[]"), "6379"
	}
	if host == "" || port == "" {
		return nil, invalid("%q is neither host:port nor a redis:// URL", spec)
	}
	return &redis.Options{Network: "tcp", Addr: net.JoinHostPort(host, port)}, nil
}

// safeName names a master in an error without repeating a secret: the
// host and port (or socket path) its spec names, without a scheme, a user
// part, a password or a query. A spec with an '@' past its authority (an
// unencoded '/', '?' or '#' in a password, or a password in the query) or
// with two is not named at all: its host cannot be told from a password.
func safeName(spec string) string {
	const hidden = "(not shown: it may hold a password)"
	scheme, rest, ok := strings.Cut(spec, "://")
	if !ok {
		rest = spec
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	auth, tail := rest[:end], rest[end:]
	if strings.Contains(tail, "@") || strings.Count(auth, "@") > 1 {
		return hidden
	}
	if _, host, ok := strings.Cut(auth, "@"); ok {
		auth = host
	}
	if scheme == "unix" {
		tail, _, _ = strings.Cut(tail, "?")
		tail, _, _ = strings.Cut(tail, "#")
		return tail
	}
	return auth
}
