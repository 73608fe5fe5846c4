package decision

import (
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// ids returns n endpoint ids in ascending order, as the fanout reads them.
func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		var u uuid.UUID
		binary.BigEndian.PutUint64(u[8:], uint64(i+1))
		u[6], u[8] = 0x70, 0x80 // version 7, RFC variant
		out[i] = u.String()
	}
	return out
}

func TestRecord(t *testing.T) {
	t.Parallel()

	t.Run("RoundTripsEveryReason", func(t *testing.T) {
		t.Parallel()
		var b Builder
		eps := ids(len(Reasons()) * 2)
		for i, r := range Reasons() {
			b.Add(r, eps[2*i])
			b.Add(r, eps[2*i+1])
		}
		rec, err := Decode(b.Encode())
		require.NoError(t, err)
		require.Len(t, rec.Outcomes, len(Reasons()))
		for i, o := range rec.Outcomes {
			require.Equal(t, Reasons()[i], o.Reason, "in reason order")
			require.Equal(t, 2, o.Count)
			require.Equal(t, []string{eps[2*i], eps[2*i+1]}, o.EndpointIDs, "in the order added")
		}
		require.Equal(t, len(eps), rec.Endpoints())
	})

	t.Run("NoEndpointsIsStillARecord", func(t *testing.T) {
		t.Parallel()
		var b Builder
		enc := b.Encode()
		require.Equal(t, []byte{version}, enc, "decided, nowhere to go")
		rec, err := Decode(enc)
		require.NoError(t, err)
		require.Empty(t, rec.Outcomes)
		require.Zero(t, rec.Endpoints())
	})

	t.Run("SamplesTheFirstAndCountsAll", func(t *testing.T) {
		t.Parallel()
		var b Builder
		eps := ids(5000)
		for _, id := range eps[:4990] {
			b.Add(NotSubscribed, id)
		}
		for _, id := range eps[4990:] {
			b.Add(Queued, id)
		}
		enc := b.Encode()
		require.LessOrEqual(t, len(enc), 1+2*(1+3+1+SampleSize*16), "two reasons: two samples and two counts, whatever the owner's size")
		rec, err := Decode(enc)
		require.NoError(t, err)
		require.Equal(t, []Outcome{
			{Reason: NotSubscribed, Count: 4990, EndpointIDs: eps[:SampleSize]},
			{Reason: Queued, Count: 10, EndpointIDs: eps[4990:]},
		}, rec.Outcomes)
	})

	t.Run("BoundedWithEveryReasonFull", func(t *testing.T) {
		t.Parallel()
		var b Builder
		eps := ids(100_000)
		for i, id := range eps {
			b.Add(Reasons()[i%len(Reasons())], id)
		}
		enc := b.Encode()
		require.LessOrEqual(t, len(enc), MaxEncodedLen)
		rec, err := Decode(enc)
		require.NoError(t, err)
		require.Equal(t, 100_000, rec.Endpoints())
		for _, o := range rec.Outcomes {
			require.Len(t, o.EndpointIDs, SampleSize)
		}
	})

	t.Run("UnknownReasonsAreIgnoredOnAddAndKeptOnDecode", func(t *testing.T) {
		t.Parallel()
		var b Builder
		b.Add(0, ids(1)[0])
		b.Add(maxReason+1, ids(1)[0])
		require.Equal(t, []byte{version}, b.Encode())

		// As a newer build would write one: decoded as itself.
		enc := append([]byte{version, byte(maxReason + 1), 3, 1}, make([]byte, 16)...)
		rec, err := Decode(enc)
		require.NoError(t, err)
		require.Equal(t, maxReason+1, rec.Outcomes[0].Reason)
		require.Equal(t, 3, rec.Outcomes[0].Count)
		require.False(t, rec.Outcomes[0].Reason.Delivered())
	})

	t.Run("AnIDThatIsNoUUIDIsCountedNotSampled", func(t *testing.T) {
		t.Parallel()
		var b Builder
		b.Add(Disabled, "not-a-uuid")
		rec, err := Decode(b.Encode())
		require.NoError(t, err)
		require.Equal(t, []Outcome{{Reason: Disabled, Count: 1, EndpointIDs: []string{}}}, rec.Outcomes)
	})

	t.Run("CorruptRecordsAreErrors", func(t *testing.T) {
		t.Parallel()
		for name, enc := range map[string][]byte{
			"Empty":             {},
			"OtherVersion":      {3},
			"TruncatedNote":     append(append([]byte{versionNotes, byte(Filtered), 1, 1}, make([]byte, 16)...), 5, 'a'),
			"TruncatedCount":    {version, byte(Queued), 0x80},
			"MissingSampleSize": {version, byte(Queued), 1},
			"TruncatedSample":   {version, byte(Queued), 1, 1, 0xaa},
			"MoreIDsThanCount":  append([]byte{version, byte(Queued), 0, 1}, make([]byte, 16)...),
		} {
			_, err := Decode(enc)
			require.ErrorIs(t, err, ErrCorrupt, name)
		}
	})

	t.Run("NotesRoundTrip", func(t *testing.T) {
		t.Parallel()
		var b Builder
		eps := ids(SampleSize + 4)
		b.Add(Queued, eps[0])
		calls := 0
		for i, id := range eps[1:] {
			b.AddNote(Filtered, id, func() string {
				calls++
				return "filter: data.n was " + strconv.Itoa(i) + ", wanted 0"
			})
		}
		require.Equal(t, SampleSize, calls, "a note is worked out for sampled endpoints only")
		enc := b.Encode()
		require.Equal(t, byte(versionNotes), enc[0])
		rec, err := Decode(enc)
		require.NoError(t, err)
		require.Equal(t, Outcome{Reason: Queued, Count: 1, EndpointIDs: eps[:1]}, rec.Outcomes[0], "no notes on a reason without any")
		f := rec.Outcomes[1]
		require.Equal(t, Filtered, f.Reason)
		require.Equal(t, SampleSize+3, f.Count)
		require.Equal(t, eps[1:SampleSize+1], f.EndpointIDs)
		require.Len(t, f.Notes, SampleSize)
		require.Equal(t, "filter: data.n was 0, wanted 0", f.Notes[0])
		require.Equal(t, "filter: data.n was 15, wanted 0", f.Notes[15])
	})

	t.Run("WithoutNotesStaysVersion1", func(t *testing.T) {
		t.Parallel()
		var b Builder
		b.AddNote(Filtered, ids(1)[0], func() string { return "" })
		enc := b.Encode()
		require.Equal(t, byte(version), enc[0], "readable by a build from before notes")
		rec, err := Decode(enc)
		require.NoError(t, err)
		require.Nil(t, rec.Outcomes[0].Notes)
	})

	t.Run("NotesAreBounded", func(t *testing.T) {
		t.Parallel()
		var b Builder
		eps := ids(100_000)
		long := strings.Repeat("é", MaxNoteLen)
		for i, id := range eps {
			r := Reasons()[i%len(Reasons())]
			if r == Filtered {
				b.AddNote(r, id, func() string { return long })
			} else {
				b.Add(r, id)
			}
		}
		enc := b.Encode()
		require.LessOrEqual(t, len(enc), MaxEncodedLen)
		rec, err := Decode(enc)
		require.NoError(t, err)
		for _, o := range rec.Outcomes {
			if o.Reason != Filtered {
				continue
			}
			for _, n := range o.Notes {
				require.LessOrEqual(t, len(n), MaxNoteLen)
				require.True(t, utf8.ValidString(n))
				require.True(t, strings.HasSuffix(n, "…"))
			}
		}
	})

	t.Run("DeliveredReasons", func(t *testing.T) {
		t.Parallel()
		var delivered []Reason
		for _, r := range Reasons() {
			if r.Delivered() {
				delivered = append(delivered, r)
			}
		}
		require.Equal(t, []Reason{Queued, HandedOff, CoolingDown, Paused}, delivered)
	})
}
