// Package decision is the fanout's record of where one event went and why
// not: for every endpoint of the event's owner, the one reason the fanout
// gave it (not subscribed, disabled, refused by a scope rule, or the way its
// delivery was enqueued). The fanout builds it while it decides (Builder)
// and stores it on the event's row (events.fanout); GetEvent reads it back
// (Decode).
//
// It is bounded whatever the owner's size: per reason, the exact count of
// endpoints and the ids of the first SampleSize of them (by id, the order
// the fanout reads endpoints in), so an owner with thousands of endpoints
// costs an event at most a few kilobytes (MaxEncodedLen), never a row per
// endpoint. Up to SampleSize endpoints per reason, the record is complete.
//
// The encoding is binary and versioned:
//
//	version byte (1)
//	per reason with a count > 0, in ascending reason order:
//	    reason byte, count uvarint, n byte (ids that follow, ≤ SampleSize),
//	    n × 16-byte endpoint id (a UUID)
//
// A record whose sampled endpoints carry notes (the filter's explanation of
// why it refused the event: AddNote) is version 2, the same but for each id
// followed by its note, a uvarint length and that many bytes of UTF-8 text
// (at most MaxNoteLen; 0 for none). A record without notes stays version 1,
// which a build from before notes reads too.
//
// A reason this build does not know (written by a newer one) decodes as
// itself, so a reader of an older build shows it as unknown rather than fail.
package decision

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Reason is why an endpoint got, or did not get, a delivery of an event.
// The values are stored: never renumber one.
type Reason uint8

// The reasons, in the order the fanout meets them.
const (
	// NotSubscribed: none of the endpoint's event_types globs matches the
	// event's type.
	NotSubscribed Reason = 1
	// Disabled: the endpoint is disabled (by its owner, or after five days
	// of failures).
	Disabled Reason = 2
	// NotTestTarget: a webhook.test event, which goes only to the endpoint
	// it names.
	NotTestTarget Reason = 3
	// NotPublished: the published-slice rule: a standalone endpoint sees a
	// note only when data.published or data.was_published is true.
	NotPublished Reason = 4
	// EmbedDenied: the access service said the embed's access code does not
	// admit the event (revoked or expired code, deleted embed, out of scope).
	EmbedDenied Reason = 5
	// NoAccessService: the endpoint is bound to an embed and this dispatcher
	// has no access service to ask, so it admits nothing.
	NoAccessService Reason = 6
	// AccessError: the access service refused the question itself (not a
	// transient failure, which is retried), so the endpoint was denied.
	AccessError Reason = 7
	// Refused: another scope rule refused (raw subject, internal type,
	// another owner's endpoint: invariants ingest already upholds).
	Refused Reason = 8
	// Queued: a delivery was enqueued, due now, for River to run.
	Queued Reason = 9
	// HandedOff: a delivery was enqueued and started at once by the process
	// that stored the event (direct delivery).
	HandedOff Reason = 10
	// CoolingDown: a delivery was enqueued behind the failing endpoint's
	// cool-down.
	CoolingDown Reason = 11
	// Paused: a delivery was enqueued for the end of the receiver's pause
	// (Retry-After).
	Paused Reason = 12
	// Filtered: the endpoint's filter refused the event (after its type
	// and scope admitted it); each sampled endpoint's note says which
	// condition failed and with what value.
	Filtered Reason = 13

	// maxReason is the highest reason this build knows.
	maxReason = Filtered
)

// Reasons lists every reason this build knows, in order.
func Reasons() []Reason {
	out := make([]Reason, 0, maxReason)
	for r := Reason(1); r <= maxReason; r++ {
		out = append(out, r)
	}
	return out
}

// Delivered reports whether an endpoint with this reason got a delivery
// (perhaps one that waits).
func (r Reason) Delivered() bool { return r >= Queued && r <= Paused }

// String is the reason's stable name (logs, tests).
func (r Reason) String() string {
	switch r {
	case NotSubscribed:
		return "not_subscribed"
	case Disabled:
		return "disabled"
	case NotTestTarget:
		return "not_test_target"
	case NotPublished:
		return "not_published"
	case EmbedDenied:
		return "embed_denied"
	case NoAccessService:
		return "no_access_service"
	case AccessError:
		return "access_error"
	case Refused:
		return "refused"
	case Queued:
		return "queued"
	case HandedOff:
		return "handed_off"
	case CoolingDown:
		return "cooling_down"
	case Paused:
		return "paused"
	case Filtered:
		return "filtered"
	default:
		return "Reason(" + strconv.Itoa(int(r)) + ")"
	}
}

const (
	version = 1
	// versionNotes is the version of a record whose samples carry notes.
	versionNotes = 2

	// SampleSize is how many endpoint ids are kept per reason: the first
	// ones by id. Beyond it only the count grows.
	SampleSize = 16

	// MaxNoteLen bounds one endpoint's note, in bytes (a longer one is cut,
	// marked with "…").
	MaxNoteLen = 400

	// MaxEncodedLen bounds an encoded record of this build: every reason
	// with a full sample (a count takes at most 5 bytes), each sampled id
	// with a note length (2 bytes at most), and the notes of one reason
	// (only Filtered carries notes).
	MaxEncodedLen = 1 + int(maxReason)*(1+binary.MaxVarintLen32+1+SampleSize*(16+2)) + SampleSize*MaxNoteLen
)

// Builder collects one event's decisions. The zero value is ready. Add
// endpoints in id order, so that the sample is the first ones by id.
type Builder struct {
	counts [maxReason + 1]uint32
	ids    [maxReason + 1][]uuid.UUID
	// notes[r][i] is the note of ids[r][i]; nil for a reason without any.
	notes    [maxReason + 1][]string
	hasNotes bool
}

// Add records that endpoint id (a UUID in text) got reason r. An id that
// does not parse is counted but not sampled: endpoint ids are UUIDs.
func (b *Builder) Add(r Reason, id string) {
	b.add(r, id, nil)
}

// AddNote is Add with a note on the endpoint, which note returns: called
// only when the endpoint is sampled (so an explanation is worked out for at
// most SampleSize endpoints per reason, however many there are). Only
// Filtered is given notes.
func (b *Builder) AddNote(r Reason, id string, note func() string) {
	b.add(r, id, note)
}

func (b *Builder) add(r Reason, id string, note func() string) {
	if r == 0 || r > maxReason {
		return
	}
	b.counts[r]++
	if len(b.ids[r]) >= SampleSize {
		return
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return
	}
	if note != nil || b.notes[r] != nil {
		n := ""
		if note != nil {
			n = cut(note(), MaxNoteLen)
		}
		if b.notes[r] == nil {
			b.notes[r] = make([]string, len(b.ids[r]), SampleSize)
		}
		b.notes[r] = append(b.notes[r], n)
		b.hasNotes = b.hasNotes || n != ""
	}
	b.ids[r] = append(b.ids[r], u)
}

// cut keeps s within n bytes of valid UTF-8, marking a cut with "…".
func cut(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	end := n - len("…")
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + "…"
}

// Count is how many endpoints were given reason r so far.
func (b *Builder) Count(r Reason) int {
	if r == 0 || r > maxReason {
		return 0
	}
	return int(b.counts[r])
}

// Encode returns the record as stored; never nil, so that an event whose
// owner has no endpoint at all still says it was decided.
func (b *Builder) Encode() []byte {
	n := 1
	for r := Reason(1); r <= maxReason; r++ {
		if b.counts[r] > 0 {
			n += 1 + binary.MaxVarintLen32 + 1 + 16*len(b.ids[r])
			if b.hasNotes {
				for _, note := range b.notes[r] {
					n += 2 + len(note)
				}
				n += len(b.ids[r]) - len(b.notes[r])
			}
		}
	}
	out := make([]byte, 1, n)
	out[0] = version
	if b.hasNotes {
		out[0] = versionNotes
	}
	for r := Reason(1); r <= maxReason; r++ {
		if b.counts[r] == 0 {
			continue
		}
		out = append(out, byte(r))
		out = binary.AppendUvarint(out, uint64(b.counts[r]))
		out = append(out, byte(len(b.ids[r])))
		for i, id := range b.ids[r] {
			out = append(out, id[:]...)
			if b.hasNotes {
				note := ""
				if i < len(b.notes[r]) {
					note = b.notes[r][i]
				}
				out = binary.AppendUvarint(out, uint64(len(note)))
				out = append(out, note...)
			}
		}
	}
	return out
}

// Outcome is one reason of a decoded record.
type Outcome struct {
	Reason Reason
	// Count is how many of the owner's endpoints got Reason.
	Count int
	// EndpointIDs are the first of them by id (at most SampleSize), in
	// canonical UUID text.
	EndpointIDs []string
	// Notes, when the reason has any, say more of each sampled endpoint:
	// Notes[i] is EndpointIDs[i]'s ("" for none). Nil otherwise.
	Notes []string
}

// Record is a decoded record.
type Record struct {
	// Outcomes in ascending reason order, only reasons with endpoints.
	Outcomes []Outcome
}

// Endpoints is how many endpoints the owner had when the fanout decided.
func (r *Record) Endpoints() int {
	n := 0
	for _, o := range r.Outcomes {
		n += o.Count
	}
	return n
}

// ErrCorrupt is returned by Decode for bytes that are not a record.
var ErrCorrupt = errors.New("decision: corrupt record")

// Decode parses an encoded record.
func Decode(b []byte) (*Record, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrCorrupt)
	}
	if b[0] != version && b[0] != versionNotes {
		return nil, fmt.Errorf("%w: version %d", ErrCorrupt, b[0])
	}
	notes := b[0] == versionNotes
	rec := &Record{}
	rest := b[1:]
	for len(rest) > 0 {
		r := Reason(rest[0])
		count, n := binary.Uvarint(rest[1:])
		if n <= 0 || count > 1<<31-1 {
			return nil, fmt.Errorf("%w: count of %s", ErrCorrupt, r)
		}
		rest = rest[1+n:]
		if len(rest) == 0 {
			return nil, fmt.Errorf("%w: sample of %s", ErrCorrupt, r)
		}
		ids := int(rest[0])
		rest = rest[1:]
		if len(rest) < 16*ids || uint64(ids) > count {
			return nil, fmt.Errorf("%w: sample of %s", ErrCorrupt, r)
		}
		o := Outcome{Reason: r, Count: int(count), EndpointIDs: make([]string, ids)}
		var noted bool
		for i := range ids {
			if len(rest) < 16 {
				return nil, fmt.Errorf("%w: sample of %s", ErrCorrupt, r)
			}
			o.EndpointIDs[i] = uuid.UUID(rest[:16]).String()
			rest = rest[16:]
			if !notes {
				continue
			}
			size, n := binary.Uvarint(rest)
			if n <= 0 || size > uint64(len(rest)-n) {
				return nil, fmt.Errorf("%w: note of %s", ErrCorrupt, r)
			}
			note := string(rest[n : n+int(size)])
			rest = rest[n+int(size):]
			if o.Notes == nil {
				o.Notes = make([]string, ids)
			}
			o.Notes[i] = note
			noted = noted || note != ""
		}
		if !noted {
			o.Notes = nil
		}
		rec.Outcomes = append(rec.Outcomes, o)
	}
	return rec, nil
}
