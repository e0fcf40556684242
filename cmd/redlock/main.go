// Command redlock runs a command while holding a distributed lock on Redis,
// like flock(1) for many machines, and shows who holds a lock.
//
//	redlock run --masters ADDR[,ADDR...] --key KEY --ttl 30s [--wait 10s] [--fencing] -- COMMAND [ARGS...]
//	redlock status --masters ADDR[,ADDR...] --key KEY
//
// The lock is an efficiency lock: it makes duplicate work rare, not
// impossible. See README.md for the exit statuses and the caveats.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/redis/go-redis/v9"
)

// Exit statuses of redlock itself. Otherwise `redlock run` exits with the
// command's status.
const (
	exitUsage       = 2   // bad flags or arguments
	exitNotObtained = 75  // EX_TEMPFAIL: another owner holds the lock; the command did not start
	exitLost        = 76  // the lock was lost, or its validity ran down to --grace, while the job ran; the job was terminated
	exitFailure     = 125 // redlock's own failure: no quorum of masters reachable, ... (as env(1), timeout(1))
	exitCannotExec  = 126 // the command was found but could not be started
	exitNotFound    = 127 // the command was not found
)

const usage = `redlock runs a command while holding a distributed lock on Redis (a flock(1)
for many machines), and shows who holds a lock.

Usage:
  redlock run    --masters ADDR[,ADDR...] --key KEY [--ttl 30s] [--wait 10s] [flags] -- COMMAND [ARGS...]
  redlock status --masters ADDR[,ADDR...] --key KEY [flags]
  redlock help [run|status]

'redlock run --help' and 'redlock status --help' list the flags.

One master means a single-instance lock; several mean the Redlock quorum
(N/2+1 independent masters). This is an efficiency lock: it makes duplicate
work rare, not impossible (a paused holder, a master restarted without
persistence). When correctness matters, use --fencing and let the resource
refuse stale fences ($REDLOCK_FENCE).

Exit status of 'redlock run':
  N     the command's own status (128+S when a signal S killed it)
  75    not obtained: another owner holds the lock (after --wait); the command did not start
  76    the lock was lost, or its validity ran down to --grace, while the job ran;
        the job got SIGTERM (SIGKILL after --grace)
  125   redlock failed: too few masters reachable for a quorum, a master refused (auth),
        a master answers in plaintext to --tls, the job's guard process died, ...
  126   the command could not be executed
  127   the command was not found
  2     usage error (bad flag or argument)
The command's own status can collide with these; pick other statuses in
scripts that must tell them apart.

Exit status of 'redlock status': 0 when every master answered, 125 when one
did not, 2 on a usage error.
`

// quiet drops go-redis's log lines (a dial refused, ...): the errors that
// matter reach redlock's own messages, which are one line each.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func main() {
	redis.SetLogger(quiet{})
	os.Exit(cli(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// cli runs redlock with args (without the program name) and returns its
// exit status.
func cli(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return runCmd(args[1:], getenv, stdout, stderr)
	case "status":
		return statusCmd(args[1:], getenv, stdout, stderr)
	case guardArg:
		return guardMain(args[1:])
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[0] == "help" {
			return cli([]string{args[1], "--help"}, getenv, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "redlock: unknown command %q\nRun 'redlock --help' for usage.\n", args[0])
		return exitUsage
	}
}

// parse parses a subcommand's flags. It returns the exit status to use
// and false when redlock should stop: --help (0) or a bad flag (2).
func parse(fs *flag.FlagSet, args []string, synopsis string, stdout, stderr io.Writer) (int, bool) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, "%s\n\nFlags (-flag and --flag are the same):\n", synopsis)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return 0, false
	}
	if err != nil {
		return usageFail(stderr, fs.Name(), err), false
	}
	return 0, true
}

// usageFail reports a usage error and returns its status.
func usageFail(stderr io.Writer, sub string, err error) int {
	fmt.Fprintf(stderr, "redlock %s: %v\nRun 'redlock %s --help' for usage.\n", sub, err, sub)
	return exitUsage
}
