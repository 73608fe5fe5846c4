package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
)

func TestMain(m *testing.M) {
	// dbtest's shared admin pool lives as long as the test binary.
	goleak.VerifyTestMain(dbtest.WithCleanup(m),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("github.com/jackc/puddle/v2.(*Pool[...]).createIdleResources"),
	)
}
