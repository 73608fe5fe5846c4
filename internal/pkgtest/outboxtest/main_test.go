// These are pkg/outbox's tests against a real Postgres (the outbox contract
// migrated into a fresh schema). They live in the dispatcher's module, not in
// pkg/, because pkg/ is a module of its own: it cannot import internal/, and
// its users must not download the dispatcher's test dependencies.

package outboxtest_test

import (
	"testing"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.VerifyTestMain(m) }
