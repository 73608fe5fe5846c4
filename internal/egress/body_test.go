package egress_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/egress"
)

// endlessBody is a response body of size bytes (or unbounded if size < 0) that
// records how much was read and whether it was closed, without allocating it.
type endlessBody struct {
	size   int64
	read   int64
	closed bool
	err    error // returned once size is exhausted instead of io.EOF, if set
}

func (b *endlessBody) Read(p []byte) (int, error) {
	if b.size >= 0 && b.read >= b.size {
		if b.err != nil {
			return 0, b.err
		}
		return 0, io.EOF
	}
	if b.size >= 0 {
		p = p[:min(int64(len(p)), b.size-b.read)]
	}
	for i := range p {
		p[i] = 'x'
	}
	b.read += int64(len(p))
	return len(p), nil
}

func (b *endlessBody) Close() error {
	b.closed = true
	return nil
}

func TestReadBody(t *testing.T) {
	t.Parallel()

	t.Run("ShortBodyReadWhole", func(t *testing.T) {
		t.Parallel()

		body := &endlessBody{size: 10}
		got, err := egress.ReadBody(&http.Response{Body: body, ContentLength: -1}, 0)
		require.NoError(t, err)
		require.Equal(t, "xxxxxxxxxx", string(got))
		require.True(t, body.closed)
	})

	t.Run("DefaultLimitIsOneKiB", func(t *testing.T) {
		t.Parallel()

		got, err := egress.ReadBody(&http.Response{Body: &endlessBody{size: 5000}, ContentLength: -1}, 0)
		require.NoError(t, err)
		require.Len(t, got, 1024)
		require.Equal(t, int64(1024), egress.DefaultBodyLimit)
	})

	t.Run("CustomLimit", func(t *testing.T) {
		t.Parallel()

		got, err := egress.ReadBody(&http.Response{Body: &endlessBody{size: 5000}, ContentLength: -1}, 100)
		require.NoError(t, err)
		require.Len(t, got, 100)
	})

	t.Run("NeverReadsAGigabyte", func(t *testing.T) {
		t.Parallel()

		for name, resp := range map[string]*http.Response{
			"UnknownLength": {Body: &endlessBody{size: -1}, ContentLength: -1},
			"KnownLength":   {Body: &endlessBody{size: 1 << 30}, ContentLength: 1 << 30},
		} {
			got, err := egress.ReadBody(resp, 0)
			require.NoError(t, err, name)
			require.Len(t, got, 1024, name)
			body := resp.Body.(*endlessBody)
			require.LessOrEqual(t, body.read, int64(1024+64<<10), name)
			require.True(t, body.closed, name)
		}
	})

	t.Run("ReadErrorWrapped", func(t *testing.T) {
		t.Parallel()

		boom := errors.New("connection reset by peer")
		body := &endlessBody{size: 10, err: boom}
		got, err := egress.ReadBody(&http.Response{Body: body, ContentLength: -1}, 0)
		require.ErrorIs(t, err, boom)
		require.Len(t, got, 10, "what was read before the error is still returned")
		require.True(t, body.closed)
	})

	t.Run("NoBody", func(t *testing.T) {
		t.Parallel()

		got, err := egress.ReadBody(&http.Response{}, 0)
		require.NoError(t, err)
		require.Empty(t, got)
		got, err = egress.ReadBody(nil, 0)
		require.NoError(t, err)
		require.Empty(t, got)
	})
}

func TestReadBodyConnectionReuse(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		receiver *receiver
		client   *http.Client
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		rcv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			n, _ := strconv.Atoi(r.URL.Query().Get("size"))
			w.Header().Set("Content-Length", strconv.Itoa(n))
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, strings.Repeat("e", n))
		})
		return &testBundle{receiver: rcv, client: egress.NewClient(egress.Config{AllowCIDRs: loopbackV4})}
	}
	// do makes a request for a body of size bytes, reads it with ReadBody and reports
	// whether the request reused a pooled connection.
	do := func(t *testing.T, bundle *testBundle, size int) (summary []byte, reused bool) {
		t.Helper()
		trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused }}
		req, err := http.NewRequest(http.MethodPost, bundle.receiver.URL+"/?size="+strconv.Itoa(size), bytes.NewReader([]byte(`{}`)))
		require.NoError(t, err)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		resp, err := bundle.client.Do(req)
		require.NoError(t, err)
		summary, err = egress.ReadBody(resp, 0)
		require.NoError(t, err)
		return summary, reused
	}

	t.Run("SmallBodyKeepsConnection", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		summary, reused := do(t, bundle, 4<<10) // over the 1 KiB summary, within the drain bound
		require.Len(t, summary, 1024)
		require.False(t, reused)
		_, reused = do(t, bundle, 10)
		require.True(t, reused, "a drained body must hand its connection back to the pool")
	})

	t.Run("HugeBodyDropsConnection", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		summary, _ := do(t, bundle, 4<<20)
		require.Len(t, summary, 1024)
		_, reused := do(t, bundle, 10)
		require.False(t, reused, "a body beyond the drain bound is abandoned with its connection")
	})
}
