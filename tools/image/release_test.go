package main

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/require"
)

func TestRelease(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		dir      string
		binaries map[string]string
		out      string
		registry string // host:port of a registry of the test's own
	}

	// setup writes stand-in binaries that print what the dispatcher's
	// --version does, and starts a registry (go-containerregistry's) on
	// loopback.
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		dir := t.TempDir()
		require.NoError(t, os.Chmod(dir, 0o755)) //nolint:gosec // the image's user runs the stand-in from here
		binaries := map[string]string{}
		for _, arch := range []string{"amd64", "arm64"} {
			bin := filepath.Join(dir, "dispatcher-"+arch)
			require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\necho \"dispatcher v1.2.3 (go1.26 linux/"+arch+")\"\n"), 0o755)) //nolint:gosec // an executable
			binaries[arch] = bin
		}
		srv := httptest.NewServer(registry.New())
		t.Cleanup(srv.Close)
		return &testBundle{dir: dir, binaries: binaries, out: filepath.Join(dir, "dist"), registry: strings.TrimPrefix(srv.URL, "http://")}
	}
	m := meta{version: "v1.2.3", revision: "abc123", source: "https://example.com/repo"}
	digestOf := func(t *testing.T, b *testBundle) string {
		t.Helper()
		d, err := os.ReadFile(filepath.Join(b.out, "image-index.digest"))
		require.NoError(t, err)
		return strings.TrimSpace(string(d))
	}

	t.Run("LayoutAndArchive", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, release(b.binaries, m, b.out, io.Discard))

		idx, tag, err := releaseIndex(filepath.Join(b.out, "oci"))
		require.NoError(t, err)
		require.Equal(t, "1.2.3", tag)
		im, err := idx.IndexManifest()
		require.NoError(t, err)
		require.Equal(t, types.OCIImageIndex, im.MediaType)
		require.Equal(t, map[string]string{annSource: m.source, annRevision: "abc123", annVersion: "1.2.3"}, im.Annotations)
		require.Len(t, im.Manifests, 2)
		for i, arch := range []string{"amd64", "arm64"} {
			require.Equal(t, &v1.Platform{OS: "linux", Architecture: arch}, im.Manifests[i].Platform)
			img, err := idx.Image(im.Manifests[i].Digest)
			require.NoError(t, err)
			cf, err := img.ConfigFile()
			require.NoError(t, err)
			require.Equal(t, arch, cf.Architecture)
			require.Equal(t, "1.2.3", cf.Config.Labels[annVersion])
			mf, err := img.Manifest()
			require.NoError(t, err)
			require.Equal(t, "abc123", mf.Annotations[annRevision])
		}
		digest, err := idx.Digest()
		require.NoError(t, err)
		require.Equal(t, digest.String(), digestOf(t, b))

		// The archive is the layout, file for file.
		f, err := os.Open(filepath.Join(b.out, "webhook-dispatcher-1.2.3-oci.tar"))
		require.NoError(t, err)
		defer f.Close()
		var names []string
		tr := tar.NewReader(f)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
			names = append(names, h.Name)
		}
		require.Contains(t, names, "oci-layout")
		require.Contains(t, names, "index.json")
		require.Contains(t, names, "blobs/sha256/"+digest.Hex)

		// The same inputs give the same index.
		again := filepath.Join(b.dir, "again")
		require.NoError(t, release(b.binaries, m, again, io.Discard))
		d2, err := os.ReadFile(filepath.Join(again, "image-index.digest"))
		require.NoError(t, err)
		require.Equal(t, digest.String(), strings.TrimSpace(string(d2)))
	})

	t.Run("PushAndPullBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, release(b.binaries, m, b.out, io.Discard))
		repo := b.registry + "/standmeet/webhook-dispatcher"
		var out strings.Builder
		require.NoError(t, push(t.Context(), filepath.Join(b.out, "oci"), repo, &out))
		require.Contains(t, out.String(), "pushed "+repo+":1.2.3")

		out.Reset()
		require.NoError(t, verify(t.Context(), repo+":1.2.3", digestOf(t, b), "v1.2.3", &out))
		require.Contains(t, out.String(), "digest "+digestOf(t, b))
		require.Contains(t, out.String(), "linux/amd64, linux/arm64")

		// By digest too, and under a tag given explicitly.
		require.NoError(t, verify(t.Context(), repo+"@"+digestOf(t, b), digestOf(t, b), "v1.2.3", io.Discard))
		require.NoError(t, push(t.Context(), filepath.Join(b.out, "oci"), repo+":stable", io.Discard))
		require.NoError(t, verify(t.Context(), repo+":stable", digestOf(t, b), "v1.2.3", io.Discard))
	})

	t.Run("VerifyRefuses", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, release(b.binaries, m, b.out, io.Discard))
		repo := b.registry + "/webhook-dispatcher"
		require.NoError(t, push(t.Context(), filepath.Join(b.out, "oci"), repo, io.Discard))

		err := verify(t.Context(), repo+":1.2.3", "sha256:"+strings.Repeat("0", 64), "v1.2.3", io.Discard)
		require.ErrorContains(t, err, "want sha256:000")
		err = verify(t.Context(), repo+":1.2.3", digestOf(t, b), "v1.2.4", io.Discard)
		require.ErrorContains(t, err, `annotated version "1.2.3", want "1.2.4"`)
		err = verify(t.Context(), repo+":nope", digestOf(t, b), "v1.2.3", io.Discard)
		require.ErrorContains(t, err, "pull "+repo+":nope")

		// An index whose amd64 image starts something else than the dispatcher.
		idx, _, err := releaseIndex(filepath.Join(b.out, "oci"))
		require.NoError(t, err)
		im, err := idx.IndexManifest()
		require.NoError(t, err)
		bad := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		for _, d := range im.Manifests {
			img, err := idx.Image(d.Digest)
			require.NoError(t, err)
			cf, err := img.ConfigFile()
			require.NoError(t, err)
			cf = cf.DeepCopy()
			cf.Config.Entrypoint = []string{"/bin/sh"}
			img, err = mutate.ConfigFile(img, cf)
			require.NoError(t, err)
			bad = mutate.AppendManifests(bad, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: d.Platform}})
		}
		bad = mutate.Annotations(bad, im.Annotations).(v1.ImageIndex)
		ref, err := name.ParseReference(repo + ":shell")
		require.NoError(t, err)
		require.NoError(t, remote.WriteIndex(ref, bad, remote.WithContext(context.Background())))
		badDigest, err := bad.Digest()
		require.NoError(t, err)
		err = verify(t.Context(), repo+":shell", badDigest.String(), "v1.2.3", io.Discard)
		require.ErrorContains(t, err, `entrypoint ["/bin/sh"], want [/dispatcher]`)
	})

	t.Run("BadInputRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		bad := m
		bad.version = "1.2.3"
		require.ErrorContains(t, release(b.binaries, bad, b.out, io.Discard), "-version must be vMAJOR.MINOR.PATCH[-pre]")
		require.ErrorContains(t, release(map[string]string{"amd64": b.binaries["amd64"]}, m, b.out, io.Discard), "no -binary arm64=")
		require.ErrorContains(t, push(t.Context(), filepath.Join(b.dir, "missing"), b.registry+"/x", io.Discard), "run make release first")
	})

	t.Run("PushRef", func(t *testing.T) {
		t.Parallel()
		for image, want := range map[string]string{
			"ghcr.io/acme/webhook-dispatcher":            "ghcr.io/acme/webhook-dispatcher:1.2.3",
			"127.0.0.1:5000/webhook-dispatcher":          "127.0.0.1:5000/webhook-dispatcher:1.2.3",
			"ghcr.io/acme/webhook-dispatcher:rc":         "ghcr.io/acme/webhook-dispatcher:rc",
			"localhost:5000/webhook-dispatcher:1.2.3-ci": "localhost:5000/webhook-dispatcher:1.2.3-ci",
		} {
			ref, err := pushRef(image, "1.2.3")
			require.NoError(t, err, image)
			require.Equal(t, want, ref.String())
		}
		_, err := pushRef("", "1.2.3")
		require.ErrorContains(t, err, "make push IMAGE=")
		_, err = pushRef("Bad Name/x", "1.2.3")
		require.ErrorContains(t, err, `-image "Bad Name/x:1.2.3"`)
	})
}
