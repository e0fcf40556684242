package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// do sends one command to addr on a fresh connection and returns the reply as text.
// It speaks just enough RESP2 for setup and readiness checks (simple strings,
// errors, integers, bulk strings), so the controller needs no go-redis client and
// starts no goroutines. A Redis error reply is returned as a *replyError.
func do(addr string, timeout time.Duration, args ...string) (string, error) {
	return doAll(addr, timeout, args)
}

// doAll is do for several commands on one connection (WAIT counts the
// acknowledgements of its own connection's writes); it returns the last
// reply, or the first error.
func doAll(addr string, timeout time.Duration, cmds ...[]string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, args := range cmds {
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	var last string
	for range cmds {
		if last, err = readReply(r); err != nil {
			return "", err
		}
	}
	return last, nil
}

// A replyError is an error reply from redis-server, e.g. "LOADING Redis is loading the dataset in memory".
type replyError struct{ msg string }

func (e *replyError) Error() string { return "redis: " + e.msg }

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("redistest: empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", &replyError{msg: line[1:]}
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("redistest: bad bulk length %q", line)
		}
		if n < 0 {
			return "", nil // nil bulk
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("redistest: unsupported reply %q", line)
	}
}

// infoField returns the value of "name:value" in an INFO-style reply, and whether it was there.
func infoField(info, name string) (string, bool) {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+":"); ok {
			return v, true
		}
	}
	return "", false
}
