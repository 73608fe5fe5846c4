package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The annotations a release's index and manifests carry (the OCI image
// spec's pre-defined keys), and the one naming its tag in the OCI layout.
const (
	annSource   = "org.opencontainers.image.source"
	annRevision = "org.opencontainers.image.revision"
	annVersion  = "org.opencontainers.image.version"
	annRefName  = "org.opencontainers.image.ref.name"
	// annContainerdName is what containerd (and so docker load of an OCI
	// archive) names the image by.
	annContainerdName = "io.containerd.image.name"
)

// releaseArchs are the architectures a release must hold.
var releaseArchs = []string{"amd64", "arm64"}

// semverRE is a release version: vMAJOR.MINOR.PATCH with an optional
// pre-release, as the git tag spells it.
var semverRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// imageVersion is a release's version as images and charts spell it: the
// git tag without its v.
func imageVersion(version string) string { return strings.TrimPrefix(version, "v") }

// release writes the multi-arch image of a release to out: the OCI layout
// out/oci (one index, tagged with the version), the same as a tarball
// out/webhook-dispatcher-<version>-oci.tar (an OCI archive: skopeo, podman
// load, docker load), and the index's digest in out/image-index.digest.
func release(binaries map[string]string, m meta, out string, stdout io.Writer) error {
	if !semverRE.MatchString(m.version) {
		return fmt.Errorf("-version must be vMAJOR.MINOR.PATCH[-pre], got %q", m.version)
	}
	if out == "" {
		return errors.New("-out is required")
	}
	for _, arch := range releaseArchs {
		if binaries[arch] == "" {
			return fmt.Errorf("no -binary %s=…: a release holds %s", arch, strings.Join(releaseArchs, " and "))
		}
	}
	tag := imageVersion(m.version)
	binVersion := m.version
	m.version = tag // labels and annotations speak the image's version
	ann := map[string]string{annSource: m.source, annRevision: m.revision, annVersion: tag}

	archs := make([]string, 0, len(binaries))
	for arch := range binaries {
		archs = append(archs, arch)
	}
	slices.Sort(archs)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range archs {
		img, err := imageOf(binaries[arch], arch, m)
		if err != nil {
			return fmt.Errorf("%s: %w", arch, err)
		}
		img, ok := mutate.Annotations(img, ann).(v1.Image)
		if !ok {
			return errors.New("annotate the image")
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}
	idx, ok := mutate.Annotations(idx, ann).(v1.ImageIndex)
	if !ok {
		return errors.New("annotate the index")
	}

	dir := filepath.Join(out, "oci")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		annRefName:        tag,
		annContainerdName: repository + ":" + tag,
	})); err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	archive := filepath.Join(out, repository+"-"+tag+"-oci.tar")
	if err := tarDir(dir, archive); err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "image-index.digest"), []byte(digest.String()+"\n"), 0o644); err != nil { //nolint:gosec // a public digest
		return err
	}
	fmt.Fprintf(stdout, "image: wrote %s and %s: index %s (linux/%s), tag %s, binary version %s\n",
		dir, archive, digest, strings.Join(archs, ", linux/"), tag, binVersion)
	return nil
}

// tarDir writes the files under dir to a tar at out, in name order, with
// fixed owners and times: the same layout gives the same tarball.
func tarDir(dir, out string) error {
	var paths []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != dir {
			paths = append(paths, path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(paths)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, path := range paths {
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		info, err := os.Stat(path)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Format: tar.FormatPAX}
		if info.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
		} else {
			h.Typeflag, h.Size = tar.TypeReg, info.Size()
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !info.IsDir() {
			if err := copyFile(tw, path); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

func copyFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// releaseIndex reads the one index a release's OCI layout holds, and the
// tag it was written with.
func releaseIndex(dir string) (v1.ImageIndex, string, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, "", fmt.Errorf("read the OCI layout %s (run make release first): %w", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, "", err
	}
	im, err := top.IndexManifest()
	if err != nil {
		return nil, "", err
	}
	if len(im.Manifests) != 1 || !im.Manifests[0].MediaType.IsIndex() {
		return nil, "", fmt.Errorf("%s: want one image index, as make release writes", dir)
	}
	idx, err := top.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		return nil, "", err
	}
	return idx, im.Manifests[0].Annotations[annRefName], nil
}

// pushRef is image with the release's tag when it names none.
func pushRef(image, tag string) (name.Reference, error) {
	if image == "" {
		return nil, errors.New("-image is required: registry/repository[:tag] (make push IMAGE=…)")
	}
	repo := image[strings.LastIndex(image, "/")+1:]
	if !strings.ContainsAny(repo, ":@") {
		if tag == "" {
			return nil, fmt.Errorf("%s names no tag, and the release has none", image)
		}
		image += ":" + tag
	}
	ref, err := name.ParseReference(image, name.StrictValidation)
	if err != nil {
		return nil, fmt.Errorf("-image %q: %w", image, err)
	}
	return ref, nil
}

// push sends a release's index, with its images, to a registry. Credentials
// come from the Docker config (docker login, or a credential helper named
// there); no daemon is involved.
func push(ctx context.Context, dir, image string, stdout io.Writer) error {
	idx, tag, err := releaseIndex(dir)
	if err != nil {
		return err
	}
	ref, err := pushRef(image, tag)
	if err != nil {
		return err
	}
	if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "image: pushed %s (%s@%s)\n", ref, ref.Context(), digest)
	return nil
}

// verify pulls image back as a runtime would: its index must have digest,
// hold every release architecture with the release's annotations, each
// image run as a numeric non-root user with the dispatcher as entrypoint,
// and this machine's architecture's binary print version.
func verify(ctx context.Context, image, digest, version string, stdout io.Writer) error {
	if image == "" || digest == "" || version == "" {
		return errors.New("-image, -digest and -version are required")
	}
	ref, err := name.ParseReference(image, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("-image %q: %w", image, err)
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	idx, err := remote.Index(ref, opts...)
	if err != nil {
		return fmt.Errorf("pull %s: %w", ref, err)
	}
	got, err := idx.Digest()
	if err != nil {
		return err
	}
	if got.String() != strings.TrimSpace(digest) {
		return fmt.Errorf("%s has digest %s, want %s", ref, got, digest)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	tag := imageVersion(version)
	if err := checkAnnotations("the index", im.Annotations, tag); err != nil {
		return err
	}
	var archs []string
	for _, d := range im.Manifests {
		if d.Platform == nil || d.Platform.OS != "linux" {
			return fmt.Errorf("%s: manifest %s has no linux platform", ref, d.Digest)
		}
		arch := d.Platform.Architecture
		archs = append(archs, arch)
		img, err := idx.Image(d.Digest)
		if err != nil {
			return fmt.Errorf("pull %s linux/%s: %w", ref, arch, err)
		}
		m, err := img.Manifest()
		if err != nil {
			return err
		}
		if err := checkAnnotations("linux/"+arch, m.Annotations, tag); err != nil {
			return err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return err
		}
		if cf.Architecture != arch || cf.Config.Labels[annVersion] != tag {
			return fmt.Errorf("linux/%s: its configuration says %s, version %q", arch, cf.Architecture, cf.Config.Labels[annVersion])
		}
		if !slices.Equal(cf.Config.Entrypoint, []string{entrypoint}) {
			return fmt.Errorf("linux/%s: entrypoint %q, want [%s]", arch, cf.Config.Entrypoint, entrypoint)
		}
		if arch == runtime.GOARCH {
			// Run what can run here: the entrypoint, as the image's user.
			if err := checkImage(img, ref.String()+" linux/"+arch, version, stdout); err != nil {
				return err
			}
		} else if err := checkUser(cf); err != nil {
			return fmt.Errorf("linux/%s: %w", arch, err)
		}
	}
	slices.Sort(archs)
	if !slices.Equal(archs, releaseArchs) {
		return fmt.Errorf("%s holds linux/%s, want linux/%s", ref, strings.Join(archs, ", linux/"), strings.Join(releaseArchs, ", linux/"))
	}
	fmt.Fprintf(stdout, "image: pulled %s back: digest %s, linux/%s, entrypoint %s, version %s\n",
		ref, got, strings.Join(archs, ", linux/"), entrypoint, tag)
	return nil
}

func checkAnnotations(what string, ann map[string]string, version string) error {
	for _, k := range []string{annSource, annRevision, annVersion} {
		if ann[k] == "" {
			return fmt.Errorf("%s has no %s annotation", what, k)
		}
	}
	if ann[annVersion] != version {
		return fmt.Errorf("%s is annotated version %q, want %q", what, ann[annVersion], version)
	}
	return nil
}

// serveRegistry serves an in-memory registry on a loopback address until
// SIGINT or SIGTERM, for testing push and verify; addrFile, when given,
// receives the address once it listens.
func serveRegistry(addr, addrFile string, stdout io.Writer) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-addr: %w", err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-addr %s: the test registry serves on a loopback address only", addr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lis, err := new(net.ListenConfig).Listen(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           registry.New(registry.Logger(log.New(io.Discard, "", 0))),
		ReadHeaderTimeout: 10 * time.Second,
	}
	if addrFile != "" {
		if err := os.WriteFile(addrFile, []byte(lis.Addr().String()+"\n"), 0o644); err != nil { //nolint:gosec // an address
			return err
		}
	}
	fmt.Fprintf(stdout, "image: test registry on %s\n", lis.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}
