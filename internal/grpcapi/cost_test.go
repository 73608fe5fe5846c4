package grpcapi

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// heldBy returns how many heap bytes the value f returns keeps alive.
func heldBy(t *testing.T, f func() any) uint64 {
	t.Helper()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	v := f()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(v)
	if after.HeapAlloc < before.HeapAlloc {
		return 0
	}
	return after.HeapAlloc - before.HeapAlloc
}

// batchJSON is a PublishBatch body of about size bytes whose events' data
// (about 4,000 bytes each, within the limit) are lists of item, the shapes
// that cost the most per byte.
func batchJSON(size int, item string) string {
	ev := `{"id":"e1","owner_id":"o","type":"t.x","data":{"a":[` + strings.TrimSuffix(strings.Repeat(item+",", 4000/(len(item)+1)), ",") + `]}}`
	return `{"events":[` + strings.TrimSuffix(strings.Repeat(ev+",", size/(len(ev)+1)), ",") + `]}`
}

// TestDecodedCost measures what decoding a request costs per element, the
// constants the budget reserves by (CostPerElement, costPerNode),
// on the shapes that cost the most: a list of zeros, of empty objects, of
// short strings, and an object of many members.
//
// Not parallel: it measures the heap, which other tests' allocations would
// inflate; the package's parallel tests wait until it is done.
func TestDecodedCost(t *testing.T) { //nolint:paralleltest // measures the heap
	const size = 1 << 20
	keys := func() string {
		var data strings.Builder
		for i := 0; data.Len() < 4000; i++ {
			if i > 0 {
				data.WriteString(",")
			}
			fmt.Fprintf(&data, "%q:0", strconv.Itoa(i))
		}
		ev := `{"id":"e1","owner_id":"o","type":"t.x","data":{` + data.String() + `}}`
		return `{"events":[` + strings.TrimSuffix(strings.Repeat(ev+",", size/(len(ev)+1)), ",") + `]}`
	}()
	for name, body := range map[string]string{ //nolint:paralleltest // measures the heap: one at a time
		"Zeros":        batchJSON(size, "0"),
		"EmptyObjects": batchJSON(size, "{}"),
		"ShortStrings": batchJSON(size, `"abcdefgh"`),
		"Members":      keys,
	} {
		t.Run(name, func(t *testing.T) {
			elements := strings.Count(body, ",") + strings.Count(body, "{") + strings.Count(body, "[") + 1
			var m *webhooksv1.PublishBatchRequest
			fromJSON := heldBy(t, func() any {
				m = &webhooksv1.PublishBatchRequest{}
				require.NoError(t, protojson.Unmarshal([]byte(body), m))
				return m
			})
			wire, err := proto.Marshal(m)
			require.NoError(t, err)
			fromWire := heldBy(t, func() any {
				m := &webhooksv1.PublishBatchRequest{}
				require.NoError(t, proto.Unmarshal(wire, m))
				return m
			})
			cost, err := publishCost(wire, true)
			require.NoError(t, err)
			t.Logf("%d JSON bytes, %d elements: protojson holds %d (%.0f an element), %d bytes encoded (%.1f an element), decoding them holds %d; reserved %d and %d",
				len(body), elements, fromJSON, float64(fromJSON)/float64(elements), len(wire), float64(len(wire))/float64(elements), fromWire,
				JSONDecodedCost(len(body), elements), cost)
			require.LessOrEqual(t, int64(fromJSON), int64(elements)*CostPerElement+int64(len(body)))
			require.LessOrEqual(t, int64(len(wire)), int64(elements)*24+int64(len(body)))
			require.LessOrEqual(t, int64(fromWire), cost, "the gate reserves at least what decoding holds")
		})
	}
}

func TestPublishCostRefusesLargeData(t *testing.T) {
	t.Parallel()
	m := &webhooksv1.PublishBatchRequest{}
	require.NoError(t, protojson.Unmarshal([]byte(`{"events":[{"id":"a"},{"id":"b","data":{"a":"`+strings.Repeat("x", MaxDataWireBytes)+`"}}]}`), m))
	wire, err := proto.Marshal(m)
	require.NoError(t, err)
	_, err = publishCost(wire, true)
	require.ErrorContains(t, err, "events[1].data is")
}
