package redlock

import (
	"errors"
	"net"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// MasterOptions returns go-redis options for one master, read from spec:
// "host:port" ("host" alone means port 6379), or a URL:
// redis://[user:password@]host:port[/db], rediss://... for TLS, or
// unix:///path/to/socket. They are set as the library needs them
// (MaxRetries: -1, ContextTimeoutEnabled: true; see [New]); change what
// else you need (TLS settings, pool size, timeouts) before
// redis.NewClient. An error never repeats a password: a URL with a user
// part that fails to parse is named by its scheme and host alone.
func MasterOptions(spec string) (*redis.Options, error) {
	o, err := parseMaster(strings.TrimSpace(spec))
	if err != nil {
		return nil, err
	}
	o.MaxRetries = -1
	o.ContextTimeoutEnabled = true
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
	if scheme, rest, ok := strings.Cut(spec, "://"); ok {
		o, err := redis.ParseURL(spec)
		if err == nil {
			return o, nil
		}
		if strings.Contains(rest, "@") {
			// The parser's message may repeat any part of the URL, the
			// password too: say only which URL, without its user part.
			return nil, invalid("%q is not a valid URL (percent-encode a user name or password that holds one of : / ? # [ ] @ %%)", redactURL(spec))
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the rest of the message repeats the URL
		}
		return nil, invalid("%q is not a valid %s URL: %v", spec, scheme, err)
	}
	if strings.Contains(spec, "@") {
		return nil, invalid("%q has a user part but no scheme: write redis://user:password@host:port", redactHost(spec))
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

// redactHost hides what comes before the last '@' of a master written
// without a scheme.
func redactHost(s string) string { return "xxx" + s[strings.LastIndex(s, "@"):] }

// redactURL hides a URL's user part in messages.
func redactURL(s string) string {
	i := strings.Index(s, "://")
	at := strings.LastIndex(s, "@")
	if i < 0 || at < i {
		return s
	}
	return s[:i+3] + "xxx" + s[at:]
}
