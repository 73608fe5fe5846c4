package event

import (
	"testing"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
)

// TestGlobLikePatternMatchesMatchGlob asks Postgres (dbtest): its schemas
// are dropped when the tests are done.
func TestMain(m *testing.M) { dbtest.VerifyTestMain(m) }
