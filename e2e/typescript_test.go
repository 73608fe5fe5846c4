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

// needTool finds a command the test needs: in CI its absence is a failure,
// elsewhere the test is skipped saying what to install.
func needTool(t *testing.T, name, why string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed: %s", name, why)
		}
		t.Skipf("%s is not installed: %s", name, why)
	}
	return path
}

// TestTypeScriptClient runs the TypeScript client's own test
// (clients/typescript/test) against the real binary: it creates an
// endpoint with a receiver of its own on loopback, publishes, lists
// deliveries and attempts, retries, and verifies what arrived with the
// official standardwebhooks package.
func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	npm := needTool(t, "npm", "the TypeScript client's test needs Node.js 20.19 or later and npm")
	needTool(t, "node", "the TypeScript client's test needs Node.js 20.19 or later")
	dir := filepath.Join("..", "clients", "typescript")
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("clients/typescript/node_modules is missing: make test installs it (npm ci)")
		}
		t.Skip("clients/typescript/node_modules is missing: make test (or npm ci in clients/typescript) installs it")
	}
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})

	// A liveness bound: the test waits out a failed attempt and the recovery
	// probe 15 s after it.
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "test")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"DISPATCHER_URL=http://"+d.grpcAddr,
		"DISPATCHER_ADMIN_TOKEN="+adminToken,
		"DISPATCHER_PUBLISHER_TOKEN="+publisherToken,
	)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "npm test in clients/typescript:\n%s\ndispatcher:\n%s", out, d.logs.String())
	t.Logf("npm test:\n%s", out)
}
