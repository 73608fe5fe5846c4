// Package riverlevel puts River's log lines at the level they deserve for the
// dispatcher's operator.
//
// River logs at ERROR many failures it then retries by itself. While Postgres
// restarts or fails over, every loop of every process reports the database
// unreachable at ERROR (the producers' fetches, the notifier's listener, the
// leader election, the batch completer), and the completer, which keeps job
// outcomes it could not write and writes them with its next batch, says
// "Too many errors; giving up": read by an operator, deliveries were lost.
// Nothing was. River UI's background queries do the same. Neither has a
// setting for these levels (each takes one *slog.Logger), so the dispatcher
// gives them a logger whose handler is wrapped here:
//
//   - a record at ERROR whose error reads as the database being unreachable
//     (database.Unreachable) is passed on at WARN, with a note that the work
//     is tried again;
//   - the batch completer's "Too many errors; giving up", which carries no
//     error of its own, is passed on at WARN in words that say what happens.
//
// Everything else passes through unchanged: an error River does not recover
// from by itself, or one that is not about reaching the database, stays an
// ERROR.
package riverlevel

import (
	"context"
	"log/slog"

	"github.com/standmeet/webhook-dispatcher/internal/database"
)

// The batch completer's message when its three tries at writing a batch of
// job outcomes failed (river/internal/jobcompleter, withRetries). The batch
// completer then puts the batch back into its backlog, which it writes with
// the next one; only a cancelled context or a closed pool drop it, and those
// return before this message.
const completerGivingUp = "jobcompleter.BatchCompleter: Too many errors; giving up"

// CompleterRetrying is what completerGivingUp is rewritten to.
const CompleterRetrying = "jobcompleter.BatchCompleter: could not write a batch of job outcomes in 3 tries; " +
	"the outcomes are kept and written with the next batch (no job is lost)"

// NoteAttr is the attribute added to a record lowered to WARN.
const NoteAttr = "note"

const unreachableNote = "the database was unreachable; River tries again by itself"

// Handler wraps next. Use it for River's and River UI's loggers only.
func Handler(next slog.Handler) slog.Handler { return &handler{next: next} }

type handler struct{ next slog.Handler }

func (h *handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level != slog.LevelError {
		return h.next.Handle(ctx, r)
	}
	var lowered slog.Record
	switch {
	case r.Message == completerGivingUp:
		lowered = slog.NewRecord(r.Time, slog.LevelWarn, CompleterRetrying, r.PC)
	case unreachable(r):
		lowered = slog.NewRecord(r.Time, slog.LevelWarn, r.Message, r.PC)
		lowered.AddAttrs(slog.String(NoteAttr, unreachableNote))
	default:
		return h.next.Handle(ctx, r)
	}
	if !h.next.Enabled(ctx, lowered.Level) {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		lowered.AddAttrs(a)
		return true
	})
	return h.next.Handle(ctx, lowered)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &handler{next: h.next.WithAttrs(attrs)}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{next: h.next.WithGroup(name)}
}

// unreachable reports whether r's error (River names it "err", or "error"
// in its maintenance services; a string mostly, an error value sometimes)
// reads as the database being unreachable.
func unreachable(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "err" && a.Key != "error" {
			return true
		}
		v := a.Value.Resolve()
		switch {
		case v.Kind() == slog.KindString:
			found = database.UnreachableText(v.String())
		case v.Kind() == slog.KindAny:
			if err, ok := v.Any().(error); ok {
				found = database.Unreachable(err) || database.UnreachableText(err.Error())
			}
		}
		return false
	})
	return found
}
