package job

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ProbeMark is what recovery probes (internal/delivery's probe.go) leave in
// a delivery job's metadata. A probe is a real request that River counts as
// an attempt, and it raises the job's max_attempts by one so that it spends
// no step of the retry schedule; River's own attempt and max_attempts
// therefore count probes too ("6 of 20" for the 4th scheduled attempt of 18
// after 2 probes). Everything shown to people reads the two apart through
// Count.
type ProbeMark struct {
	// Due is when the delivery was due before the last probe took it.
	Due *time.Time `json:"probe_due,omitempty"`
	// Probes counts the probes it carried.
	Probes int `json:"probes,omitempty"`
	// Attempts are River's attempt numbers that were probes (recorded since
	// this field exists; Probes counts older ones too).
	Attempts []int `json:"probe_attempts,omitempty"`
}

// ReadProbeMark reads the probe mark of a delivery job's metadata; a job
// never probed has the zero mark. It does not parse metadata without one.
func ReadProbeMark(metadata []byte) ProbeMark {
	var m ProbeMark
	if bytes.Contains(metadata, []byte(`"probes"`)) {
		_ = json.Unmarshal(metadata, &m)
	}
	return m
}

// Attempts is how far a delivery has gone, in a person's words: the
// attempts of its retry schedule and its recovery probes, counted apart.
type Attempts struct {
	// Attempt is how many scheduled attempts it has spent, one in flight
	// included.
	Attempt int
	// Max is how many scheduled attempts it has (DeliverMaxAttempts; one
	// more for each Redeliver of a delivery that had spent them all).
	Max int
	// Probes is how many recovery probes it has carried, one in flight
	// included.
	Probes int
	// Probe reports that River's current attempt (the one in flight, or
	// the last one) was a probe.
	Probe bool
}

// Count reads River's attempt and max_attempts of a delivery job apart:
// the probes in m are taken out of both.
//
// A probe is marked when it is queued, before River runs it: its attempt
// number (in m.Attempts) is then still ahead of River's attempt, and it has
// already raised max_attempts. Such a probe is taken out of Max but not out
// of Attempt, which would otherwise read one less than the attempts spent
// for as long as the probe waits for a worker.
func (m ProbeMark) Count(attempt, maxAttempts int) Attempts {
	all := max(m.Probes, 0)
	queued := 0
	for _, a := range m.Attempts {
		if a > attempt {
			queued++
		}
	}
	probes := min(max(all-queued, 0), attempt)
	return Attempts{
		Attempt: attempt - probes,
		Max:     max(maxAttempts-probes-queued, 0),
		Probes:  probes,
		Probe:   attempt > 0 && slices.Contains(m.Attempts, attempt),
	}
}

// String is the count as the CLI, the API's sentences and the logs say it:
// "attempt 4 of 18", "attempt 4 of 18, 2 probes", or, while the current
// request is a probe, "probe 2, after attempt 3 of 18".
func (a Attempts) String() string {
	if a.Probe {
		return fmt.Sprintf("probe %d, after attempt %d of %d", a.Probes, a.Attempt, a.Max)
	}
	s := fmt.Sprintf("attempt %d of %d", a.Attempt, a.Max)
	switch a.Probes {
	case 0:
	case 1:
		s += ", 1 probe"
	default:
		s += fmt.Sprintf(", %d probes", a.Probes)
	}
	return s
}

// AttemptHeader is the request header that tells a receiver where a
// delivery stands, in the form of Attempts.Header. It is informational
// (not signed); `dispatcher listen` prints it.
const AttemptHeader = "Dispatcher-Attempt"

// Header is the AttemptHeader value: an RFC 8941 dictionary,
// "attempt=4, max=18, probes=2", with ", probe" on a probe.
func (a Attempts) Header() string {
	// Built without fmt: every attempt sends one.
	b := make([]byte, 0, 48)
	b = append(b, "attempt="...)
	b = strconv.AppendInt(b, int64(a.Attempt), 10)
	b = append(b, ", max="...)
	b = strconv.AppendInt(b, int64(a.Max), 10)
	b = append(b, ", probes="...)
	b = strconv.AppendInt(b, int64(a.Probes), 10)
	if a.Probe {
		b = append(b, ", probe"...)
	}
	return string(b)
}

// ParseAttemptHeader reads an AttemptHeader value; ok is false for a value
// without a valid attempt and max.
func ParseAttemptHeader(v string) (a Attempts, ok bool) {
	var seen int
	for item := range strings.SplitSeq(v, ",") {
		key, val, hasVal := strings.Cut(strings.TrimSpace(item), "=")
		if !hasVal {
			if key == "probe" {
				a.Probe = true
			}
			continue
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 0 {
			return Attempts{}, false
		}
		switch key {
		case "attempt":
			a.Attempt, seen = n, seen|1
		case "max":
			a.Max, seen = n, seen|2
		case "probes":
			a.Probes = n
		}
	}
	return a, seen == 3
}

// ProbeSlotKey is the key, in a delivery job's metadata, of the probe slot
// the job was given: the endpoint's probe_at (webhook_endpoints.probe_at, the
// time its next probe is due), in microseconds since the Unix epoch, as it
// was when the slot was given. While an endpoint is failing, only the
// delivery that holds its current slot (its probe_at unchanged since) may
// send; every other one is held without a request (internal/delivery's
// failing.go). Recovery probing gives the slot (probe.go), and so does an
// operator's RetryDelivery, which takes the next probe's place.
const ProbeSlotKey = "probe_slot"

// ReadProbeSlot reads the probe slot recorded in a delivery job's metadata
// (ProbeSlotKey); ok is false for a job that was never given one. It does
// not parse metadata without one.
func ReadProbeSlot(metadata []byte) (slot int64, ok bool) {
	if !bytes.Contains(metadata, []byte(`"`+ProbeSlotKey+`"`)) {
		return 0, false
	}
	var m struct {
		Slot *int64 `json:"probe_slot"`
	}
	if json.Unmarshal(metadata, &m) != nil || m.Slot == nil {
		return 0, false
	}
	return *m.Slot, true
}

// HoldsProbeSlot reports whether a job whose metadata is metadata holds the
// probe slot of an endpoint whose probe_at is probeAt (nil: none).
func HoldsProbeSlot(metadata []byte, probeAt *time.Time) bool {
	if probeAt == nil {
		return false
	}
	slot, ok := ReadProbeSlot(metadata)
	return ok && slot == probeAt.UnixMicro()
}
