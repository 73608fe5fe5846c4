package delivery

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(dbtest.WithCleanup(m),
		// pgxpool health checks and the shared dbtest admin pool outlive tests.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
	)
}
