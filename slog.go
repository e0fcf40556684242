package redlock

import (
	"context"
	"log/slog"
	"strings"
)

// SlogObserver returns an [Observer] that logs to l the events worth a log
// line, with structured attributes: at Warn, a lost lock, a failed renewal,
// a Release that found the lock lost, an Obtain that found the masters
// unavailable, a master that stopped answering; at Info, a master that
// answers again; at Debug, every other Obtain, Extend and Release.
//
// Every record has the lock's key; a lost lock's has its reason (a
// [LostReason]: refused, ran_out, max_hold), held and since_renewal; a
// record at Warn about a lock names the masters it heard from, when it
// has their answers: masters (addresses) and answers (in the same order:
// "ok", or what went wrong), as redlockotel's spans do. No record carries
// a lock's token or a master's password. A nil l means slog.Default().
func SlogObserver(l *slog.Logger) Observer {
	if l == nil {
		l = slog.Default()
	}
	return slogObserver{l}
}

type slogObserver struct{ l *slog.Logger }

func (o slogObserver) Observe(ctx context.Context, e Event) {
	switch e := e.(type) {
	case *ObtainEvent:
		level := slog.LevelDebug
		if e.Outcome == Unavailable {
			level = slog.LevelWarn
		}
		if level == slog.LevelDebug {
			o.l.LogAttrs(ctx, level, "redlock: obtain", slog.String("key", e.Key), slog.String("outcome", string(e.Outcome)),
				slog.Int("attempts", e.Attempts), slog.Duration("wait", e.Wait), errAttr(e.Err))
			return
		}
		masters, answers := mastersAttrs(e.Masters)
		o.l.LogAttrs(ctx, level, "redlock: obtain", slog.String("key", e.Key), slog.String("outcome", string(e.Outcome)),
			slog.Int("attempts", e.Attempts), slog.Duration("wait", e.Wait), masters, answers, errAttr(e.Err))
	case *ExtendEvent:
		level, msg := slog.LevelDebug, "redlock: extend"
		if e.Renewal {
			msg = "redlock: renewal"
		}
		// A renewal cancelled (a Release or stop cut it short) is no failure.
		if e.Outcome != Extended && e.Outcome != Cancelled && (e.Renewal || e.Outcome == Lost) {
			level = slog.LevelWarn
			if e.Renewal {
				msg = "redlock: renewal failed"
			}
		}
		var masters, answers slog.Attr
		if level == slog.LevelWarn {
			masters, answers = mastersAttrs(e.Masters)
		}
		o.l.LogAttrs(ctx, level, msg, slog.String("key", e.Key), slog.String("outcome", string(e.Outcome)),
			slog.Duration("latency", e.Latency), slog.Duration("validity_before", e.Before), slog.Duration("validity_after", e.After),
			masters, answers, errAttr(e.Err))
	case *ReleaseEvent:
		level := slog.LevelDebug
		var masters, answers slog.Attr
		if e.Outcome == Lost {
			level = slog.LevelWarn // the work may have overlapped another holder's
			masters, answers = mastersAttrs(e.Masters)
		}
		o.l.LogAttrs(ctx, level, "redlock: release", slog.String("key", e.Key), slog.String("outcome", string(e.Outcome)),
			slog.Duration("held", e.Held), masters, answers, errAttr(e.Err))
	case *LostEvent:
		// The masters' answers are those of the error that ended the lock
		// (a refused renewal's, the last failed one's), when it has them
		// (TestSlogLostLockNamesItsReasonAndMastersAndNoSecret).
		masters, answers := mastersAttrs(nodesOf(e.Cause))
		cause := slog.Attr{}
		if e.Cause != nil {
			cause = slog.String("cause", e.Cause.Error())
		}
		o.l.LogAttrs(ctx, slog.LevelWarn, "redlock: lock lost", slog.String("key", e.Key), slog.String("reason", string(e.Reason)),
			slog.Duration("held", e.Held), slog.Duration("since_renewal", e.SinceRenewal), masters, answers, cause)
	case *BacklogEvent:
		if e.Behind {
			o.l.LogAttrs(ctx, slog.LevelWarn, "redlock: renewals behind", slog.Int("due", e.Due), slog.Duration("late", e.Late))
		} else {
			o.l.LogAttrs(ctx, slog.LevelInfo, "redlock: renewals caught up")
		}
	case *MasterEvent:
		if e.Up {
			o.l.LogAttrs(ctx, slog.LevelInfo, "redlock: master answers again", slog.String("master", e.Addr))
		} else {
			o.l.LogAttrs(ctx, slog.LevelWarn, "redlock: master stopped answering", slog.String("master", e.Addr), errAttr(e.Err))
		}
	}
}

// mastersAttrs returns the masters' addresses and their answers ("ok", or
// the error without the "redlock: " prefix), or two empty attributes
// (which slog drops) when there are none.
func mastersAttrs(nodes []NodeError) (masters, answers slog.Attr) {
	if len(nodes) == 0 {
		return slog.Attr{}, slog.Attr{}
	}
	addrs := make([]string, len(nodes))
	said := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
		if n.Err == nil {
			said[i] = "ok"
		} else {
			said[i] = strings.TrimPrefix(n.Err.Error(), "redlock: ")
		}
	}
	return slog.Any("masters", addrs), slog.Any("answers", said)
}

func errAttr(err error) slog.Attr {
	if err == nil {
		return slog.Attr{}
	}
	return slog.String("error", err.Error())
}
