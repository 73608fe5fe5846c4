package portal

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
)

func TestConsoleBacklogs(t *testing.T) {
	t.Parallel()

	t.Run("TheOwnersWithTheLargestBacklogs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		for i, n := range []int{3, 7} {
			ep := testfactory.Endpoint(ctx, t, b.db.Pool, &testfactory.EndpointOpts{OwnerID: fmt.Sprintf("owner-backlog-%d", i)})
			for j := range n {
				testfactory.Job(ctx, t, b.db.Pool, &testfactory.JobOpts{
					Args:        job.DeliverArgs{EndpointID: ep.String(), EventID: fmt.Sprintf("evt_%d_%d", i, j)},
					ScheduledAt: new(time.Now().Add(-time.Minute)),
				})
			}
		}
		rec := httptest.NewRecorder()
		b.portal.Console("/console/", "/riverui").ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/console/", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		body := rec.Body.String()
		require.Contains(t, body, "Owners with the largest backlogs")
		big, small := strings.Index(body, "owner-backlog-1"), strings.Index(body, "owner-backlog-0")
		require.Positive(t, big)
		require.Greater(t, small, big, "the largest first")
		require.Contains(t, body, `<td data-label="Waiting">7</td>`)
	})

	t.Run("NoneWaiting", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := httptest.NewRecorder()
		b.portal.Console("/console/", "/riverui").ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/console/", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		require.Contains(t, rec.Body.String(), "No delivery is waiting to be fetched.")
	})
}
