package endpoint

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
)

func TestMain(m *testing.M) {
	// The pgx pools of dbtest and the shared admin pool outlive single tests
	// by design; everything this package starts (gRPC servers) must not.
	goleak.VerifyTestMain(dbtest.WithCleanup(m),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("github.com/jackc/puddle/v2.(*Pool[...]).createIdleResources"),
	)
}
