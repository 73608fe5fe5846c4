package metrics_test

import (
	"os"
	"testing"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.WithCleanup(m).Run()) }
