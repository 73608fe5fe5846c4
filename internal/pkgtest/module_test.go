package pkgtest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestApplicationGoSum: an application that imports the client packages
// (pkg/client, pkg/outbox, pkg/webhook, pkg/catalog) gets none of the
// dispatcher's own dependencies in its go.sum: no testcontainers (and the
// Docker client it pulls), no River, no Prometheus server code. It builds a
// scratch module in a temporary directory that requires pkg/'s module,
// replaced by this repository's ./pkg, runs go mod tidy and go build there,
// and reads its go.sum.
func TestApplicationGoSum(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to build the scratch module")
	pkgDir, err := filepath.Abs("../../pkg")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(pkgDir, "go.mod"))

	app := t.TempDir()
	write := func(name, text string) {
		require.NoError(t, os.WriteFile(filepath.Join(app, name), []byte(text), 0o600))
	}
	write("go.mod", `module example.com/app

go 1.26.0

require github.com/standmeet/webhook-dispatcher/pkg v0.0.0

replace github.com/standmeet/webhook-dispatcher/pkg => `+pkgDir+`
`)
	write("main.go", `package main

import (
	"context"
	"fmt"

	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
	"github.com/standmeet/webhook-dispatcher/pkg/client"
	"github.com/standmeet/webhook-dispatcher/pkg/outbox"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func main() {
	c, err := client.Dial("127.0.0.1:7070", client.WithInsecure(), client.WithCatalog(catalog.Default()))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	a, err := client.DialAdmin("127.0.0.1:7070", client.WithInsecure())
	if err != nil {
		panic(err)
	}
	defer a.Close()
	_, _ = a.Stats(context.Background(), "owner_1")
	var _ outbox.Option = outbox.WithCatalog(catalog.Default())
	_, err = webhook.NewVerifier("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	fmt.Println(err)
}
`)
	run := func(args ...string) {
		cmd := exec.CommandContext(t.Context(), goBin, args...)
		cmd.Dir = app
		// The scratch module's own settings, whatever the environment's
		// (GOFLAGS=-mod=vendor, a workspace).
		cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s: %s", strings.Join(args, " "), out)
	}
	run("mod", "tidy")
	run("build", "-o", os.DevNull, ".")

	sum, err := os.ReadFile(filepath.Join(app, "go.sum"))
	require.NoError(t, err)
	for _, dep := range []string{
		"github.com/testcontainers/",                                       // the dispatcher's test database harness
		"github.com/docker/", "github.com/moby/", "github.com/containerd/", // what testcontainers pulls
		"github.com/riverqueue/",                   // the job queue
		"github.com/prometheus/client_golang",      // the metrics server
		"go.uber.org/goleak",                       // the dispatcher's test helpers
		"github.com/standmeet/webhook-dispatcher ", // the dispatcher's module itself
	} {
		require.NotContains(t, string(sum), dep, "the application's go.sum lists %s", dep)
	}
	require.Contains(t, string(sum), "google.golang.org/grpc ", "the client's own dependencies are there")
}
