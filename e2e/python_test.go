package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
)

// TestPythonClient runs the Python client's tests (clients/python/tests)
// with the OS's python3 against the real binary: publish and the admin calls
// over the HTTP API, a delivery to a loopback receiver verified with the
// client's verifier, which the same run checks against the Standard Webhooks
// vectors. Nothing is installed: the client is the standard library only.
func TestPythonClient(t *testing.T) {
	t.Parallel()
	python := needTool(t, "python3", "the Python client's tests need python3 (3.10 or later)")
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})

	// A liveness bound for a loaded machine, not a speed expectation.
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
	cmd.Dir = filepath.Join("..", "clients", "python")
	cmd.Env = append(os.Environ(),
		"PYTHONDONTWRITEBYTECODE=1",
		"DISPATCHER_PYTHON_LIVE=1",
		"DISPATCHER_URL=http://"+d.grpcAddr,
		"DISPATCHER_ADMIN_TOKEN="+adminToken,
		"DISPATCHER_PUBLISHER_TOKEN="+publisherToken,
	)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "python3 -m unittest in clients/python:\n%s\ndispatcher:\n%s", out, d.logs.String())
	require.NotContains(t, string(out), "skipped", "every test ran:\n%s", out)
	t.Logf("python3 -m unittest:\n%s", out)
}
