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

// TestTypeScriptPackage installs the TypeScript client as an adopter would:
// the tarball `make ts/pack` builds goes into a fresh npm project in a
// temporary directory outside the clone (a copy, not a symlink), beside the
// official standardwebhooks package. The project generates its types from
// the document a dispatcher running a catalog of its own serves, with the
// one command the client's README gives, compiles a program using the
// catalog's custom type under strict, and runs it against the binary: it
// publishes, receives the delivery and verifies it (testdata/tspackage).
func TestTypeScriptPackage(t *testing.T) {
	t.Parallel()
	npm := needTool(t, "npm", "the TypeScript package test needs Node.js 20.19 or later and npm")
	node := needTool(t, "node", "the TypeScript package test needs Node.js 20.19 or later")
	if _, err := os.Stat(filepath.Join("..", "clients", "typescript", "node_modules")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("clients/typescript/node_modules is missing: make test installs it (npm ci)")
		}
		t.Skip("clients/typescript/node_modules is missing: make test (or npm ci in clients/typescript) installs it")
	}
	// Liveness bounds for a loaded machine: npm install from its cache or
	// the registry, tsc, one delivery.
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	run := func(dir string, env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s %v in %s:\n%s", name, args, dir, out)
		return string(out)
	}

	tmp := t.TempDir()
	packDir := filepath.Join(tmp, "pack")
	run("..", nil, "scripts/ts-pack.sh", packDir, "v0.0.0-e2e")
	tarball := filepath.Join(packDir, "standmeet-dispatcher-client-0.0.0-e2e.tgz")
	require.FileExists(t, tarball)

	project := filepath.Join(tmp, "adopter")
	require.NoError(t, os.MkdirAll(filepath.Join(project, "src"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(project, "package.json"),
		[]byte(`{"name": "adopter", "version": "1.0.0", "private": true, "type": "module"}`+"\n"), 0o600))
	for _, f := range []struct{ from, to string }{{"main.ts", "src/main.ts"}, {"tsconfig.json", "tsconfig.json"}} {
		b, err := os.ReadFile(filepath.Join("testdata", "tspackage", f.from))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(project, f.to), b, 0o600))
	}
	// The versions clients/typescript pins, so that npm's cache serves them.
	run(project, nil, npm, "install", "--no-audit", "--no-fund", "--prefer-offline", tarball,
		"standardwebhooks@1.3.0", "typescript@5.9.3", "openapi-typescript@7.13.0", "@types/node@20.19.43")
	installed := filepath.Join(project, "node_modules", "@standmeet", "dispatcher-client")
	info, err := os.Lstat(installed)
	require.NoError(t, err)
	require.True(t, info.IsDir() && info.Mode()&os.ModeSymlink == 0, "the package is a copy, not a symlink into the clone")
	require.FileExists(t, filepath.Join(installed, "dist", "src", "index.js"), "the tarball holds the built client")
	require.NoDirExists(t, filepath.Join(installed, "node_modules", "typescript"), "no build tools at run time")

	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate", "--catalog", customCatalog(t)}})
	// The README's command: types from the served document.
	run(project, nil, npm, "exec", "--", "openapi-typescript", "http://"+d.grpcAddr+"/openapi.json", "-o", "src/dispatcher-api.ts")
	run(project, nil, npm, "exec", "--", "tsc", "-p", ".")

	out := run(project, []string{
		"DISPATCHER_URL=http://" + d.grpcAddr,
		"DISPATCHER_ADMIN_TOKEN=" + adminToken,
		"DISPATCHER_PUBLISHER_TOKEN=" + publisherToken,
	}, node, "dist/main.js")
	require.Regexp(t, `(?m)^verified \S+$`, out)
}
