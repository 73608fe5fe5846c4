package portal

import (
	"testing"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.VerifyTestMain(m) }
