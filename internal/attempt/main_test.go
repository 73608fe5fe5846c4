package attempt

import (
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.VerifyTestMain(m) }

type testBundle struct {
	db  *dbtest.DB
	rec *Recorder
}

func setup(t *testing.T, cfg RecorderConfig) *testBundle {
	t.Helper()
	db := dbtest.New(t)
	return &testBundle{db: db, rec: NewRecorder(cfg, db.Pool, slog.New(slog.DiscardHandler))}
}

func sample(delivery int64, ep uuid.UUID, started time.Time, o Outcome, d time.Duration) Attempt {
	return Attempt{
		DeliveryID: delivery, Number: 1, OwnerID: "owner-1", EndpointID: ep, EventID: "ev-1",
		StartedAt: started, Duration: d, Outcome: o, Status: map[Outcome]int{OutcomeSuccess: 200, OutcomeHTTP5xx: 503, OutcomeHTTP4xx: 410}[o],
	}
}
