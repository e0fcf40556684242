package redlock

import (
	"context"
	"log/slog"
)

// SlogObserver returns an [Observer] that logs to l the events worth a log
// line, with structured attributes: at Warn, a lost lock, a failed renewal,
// a Release that found the lock lost, an Obtain that found the masters
// unavailable, a master that stopped answering; at Info, a master that
// answers again; at Debug, every other Obtain, Extend and Release. A nil l
// means slog.Default().
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
		o.l.LogAttrs(ctx, level, "redlock: obtain", slog.String("key", e.Key), slog.String("outcome", string(e.Outcome)),
			slog.Int("attempts", e.Attempts), slog.Duration("wait", e.Wait), errAttr(e.Err))
	case *ExtendEvent:
		level, msg := slog.LevelDebug, "redlock: extend"
		if e.Renewal {
			msg = "redlock: renewal"
		}
		if e.Outcome != Extended && (e.Renewal || e.Outcome == Lost) {
			level = slog.LevelWarn
			if e.Renewal {
				msg = "redlock: renewal failed"
			}
		}
		o.l.LogAttrs(ctx, level, msg, slog.String("key", e.Key), slog.String("outcome", string(e.Outcome)),
			slog.Duration("latency", e.Latency), slog.Duration("validity_before", e.Before), slog.Duration("validity_after", e.After), errAttr(e.Err))
	case *ReleaseEvent:
		level := slog.LevelDebug
		if e.Outcome == Lost {
			level = slog.LevelWarn // the work may have overlapped another holder's
		}
		o.l.LogAttrs(ctx, level, "redlock: release", slog.String("key", e.Key), slog.String("outcome", string(e.Outcome)),
			slog.Duration("held", e.Held), errAttr(e.Err))
	case *LostEvent:
		o.l.LogAttrs(ctx, slog.LevelWarn, "redlock: lock lost", slog.String("key", e.Key), slog.Duration("held", e.Held),
			slog.Duration("since_renewal", e.SinceRenewal), slog.String("cause", e.Cause.Error()))
	case *MasterEvent:
		if e.Up {
			o.l.LogAttrs(ctx, slog.LevelInfo, "redlock: master answers again", slog.String("master", e.Addr))
		} else {
			o.l.LogAttrs(ctx, slog.LevelWarn, "redlock: master stopped answering", slog.String("master", e.Addr), errAttr(e.Err))
		}
	}
}

func errAttr(err error) slog.Attr {
	if err == nil {
		return slog.Attr{}
	}
	return slog.String("error", err.Error())
}
