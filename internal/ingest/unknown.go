package ingest

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/standmeet/webhook-dispatcher/internal/metrics"
)

// UnknownTypes says what ingest does with an event whose type is in no
// catalog. Either way the event is counted by type and logged (rate limited):
// such a type is most often a misspelling, and the publisher should hear of it.
type UnknownTypes int

const (
	// UnknownTypesAccept accepts the event and drops it, never delivered
	// (OutcomeDroppedUnknown): a type nobody classified is Internal.
	UnknownTypesAccept UnknownTypes = iota
	// UnknownTypesRefuse refuses the event as invalid, naming its type
	// field: InvalidArgument over gRPC, a set-aside row in the outbox.
	UnknownTypesRefuse
)

// ParseUnknownTypes reads the -unknown-types setting: "accept" or "refuse".
func ParseUnknownTypes(s string) (UnknownTypes, bool) {
	switch s {
	case "accept":
		return UnknownTypesAccept, true
	case "refuse":
		return UnknownTypesRefuse, true
	default:
		return 0, false
	}
}

func (u UnknownTypes) String() string {
	if u == UnknownTypesRefuse {
		return "refuse"
	}
	return "accept"
}

const (
	// MaxUnknownTypeLabels bounds the type label of
	// dispatcher_ingest_unknown_types_total: the first names a process sees
	// keep their own series, later ones count as "other". A publisher
	// inventing type names cannot grow the scrape without limit.
	MaxUnknownTypeLabels = 100
	// unknownTypeOther is the label of every type past the bound.
	unknownTypeOther = "other"

	// unknownLogInterval is how often one type is logged at most, and
	// unknownLogBurst how many lines all types together may write per
	// interval: a publisher sending thousands of events of a misspelled type
	// gets a line a minute, not a line an event.
	unknownLogInterval = time.Minute
	unknownLogBurst    = 20
)

// unknownTypes counts and logs events of types in no catalog.
type unknownTypes struct {
	logger  *slog.Logger
	metrics *metrics.Metrics
	now     func() time.Time

	mu sync.Mutex
	// labelled holds the type names that have a series of their own.
	labelled map[string]bool
	// window is the start of the current log interval, logged the types
	// logged in it, lines how many lines were written in it and suppressed
	// how many events were not logged.
	window     time.Time
	logged     map[string]struct{}
	lines      int
	suppressed int
}

func newUnknownTypes(m *metrics.Metrics, logger *slog.Logger, now func() time.Time) *unknownTypes {
	return &unknownTypes{logger: logger, metrics: m, now: now, labelled: map[string]bool{}, logged: map[string]struct{}{}}
}

// seen records one event of typ from source, refused or dropped; near is
// the catalog type nearest typ (catalog.Closest), "" for none.
func (u *unknownTypes) seen(ctx context.Context, source Source, typ, ownerID, near string, refused bool) {
	u.mu.Lock()
	label := typ
	if !u.labelled[typ] {
		if len(u.labelled) < MaxUnknownTypeLabels {
			u.labelled[typ] = true
		} else {
			label = unknownTypeOther
		}
	}
	now := u.now()
	var (
		write      bool
		suppressed int
	)
	if now.Sub(u.window) >= unknownLogInterval {
		suppressed = u.suppressed
		u.window, u.lines, u.suppressed = now, 0, 0
		clear(u.logged)
	}
	if _, done := u.logged[typ]; !done && u.lines < unknownLogBurst {
		u.logged[typ] = struct{}{}
		u.lines++
		write = true
	} else {
		u.suppressed++
	}
	u.mu.Unlock()

	if u.metrics != nil {
		u.metrics.IngestUnknownTypesTotal.WithLabelValues(label).Inc()
	}
	if !write {
		return
	}
	what := "dropped: it is never delivered"
	if refused {
		what = "refused (-unknown-types=refuse)"
	}
	// The type name is the publisher's own and bounded (webhook.MaxTypeLen,
	// dotted lower-case segments), so it is safe to log; data is not logged.
	attrs := []slog.Attr{
		slog.String("type", typ),
		slog.String("source", string(source)),
		slog.String("owner_id", ownerID),
	}
	msg := "ingest: event type is in no catalog (a misspelling?); "
	if near != "" {
		attrs = append(attrs, slog.String("did_you_mean", near))
		msg = "ingest: event type is in no catalog; did you mean " + strconv.Quote(near) + "? "
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("not_logged_last_interval", suppressed))
	}
	u.logger.LogAttrs(ctx, slog.LevelWarn, msg+what+"; at most one line per type a minute", attrs...)
}
