package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/require"
)

func TestImage(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		dir, image string
	}

	// setup builds an image around a stand-in binary that prints what the
	// dispatcher's --version does.
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		dir := t.TempDir()
		bin := filepath.Join(dir, "dispatcher")
		require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\necho \"dispatcher v1.2.3 (go1.26 linux/amd64)\"\n"), 0o755))
		image := filepath.Join(dir, "image.tar")
		require.NoError(t, build(bin, "amd64", "v1.2.3", "abc", "https://example.com/repo", time.Time{}, image, io.Discard))
		return &testBundle{dir: dir, image: image}
	}

	t.Run("BuiltImagePasses", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, check(b.image, "v1.2.3", io.Discard))

		img, err := tarball.ImageFromPath(b.image, nil)
		require.NoError(t, err)
		cf, err := img.ConfigFile()
		require.NoError(t, err)
		require.Equal(t, "65532:65532", cf.Config.User)
		require.Equal(t, []string{"/dispatcher"}, cf.Config.Entrypoint)
		require.Equal(t, []string{"serve"}, cf.Config.Cmd)
		require.Equal(t, "v1.2.3", cf.Config.Labels["org.opencontainers.image.version"])
		require.Equal(t, "linux", cf.OS)

		m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(b.image) })
		require.NoError(t, err)
		require.Len(t, m, 1)
		require.ElementsMatch(t, []string{"webhook-dispatcher:v1.2.3", "webhook-dispatcher:latest"}, m[0].RepoTags)
	})

	t.Run("SameInputsSameDigest", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		again := filepath.Join(b.dir, "again.tar")
		require.NoError(t, build(filepath.Join(b.dir, "dispatcher"), "amd64", "v1.2.3", "abc", "https://example.com/repo", time.Time{}, again, io.Discard))
		digest := func(path string) string {
			img, err := tarball.ImageFromPath(path, nil)
			require.NoError(t, err)
			d, err := img.Digest()
			require.NoError(t, err)
			return d.String()
		}
		require.Equal(t, digest(b.image), digest(again))
	})

	t.Run("RootUserRejected", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, user := range []string{"0", "root", "", "0:0"} {
			img, err := tarball.ImageFromPath(b.image, nil)
			require.NoError(t, err)
			cf, err := img.ConfigFile()
			require.NoError(t, err)
			cf = cf.DeepCopy()
			cf.Config.User = user
			img, err = mutate.ConfigFile(img, cf)
			require.NoError(t, err)
			path := filepath.Join(b.dir, "root.tar")
			require.NoError(t, tarball.WriteToFile(path, name.MustParseReference("x:y").(name.Tag), img))
			require.ErrorContains(t, check(path, "", io.Discard), "want a numeric uid other than 0", "user %q", user)
		}
	})

	t.Run("WrongVersionRejected", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.ErrorContains(t, check(b.image, "v9.9.9", io.Discard), `printed "dispatcher v1.2.3`)
	})

	t.Run("TagOfVersion", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "v1.2.3-4-gabc-dirty", tagOf("v1.2.3-4-gabc-dirty"))
		require.Equal(t, "dev", tagOf(""))
		require.Equal(t, "a_b", tagOf("-a/b"))
	})
}
