// Command image builds, checks, releases and pushes the dispatcher's
// container image without a Docker daemon: the static binary is appended as
// one layer onto an empty image (go-containerregistry).
//
//	image build    -binary bin/linux-amd64/dispatcher -arch amd64 -version v1.2.3 -o bin/dispatcher-image.tar
//	image check    -image bin/dispatcher-image.tar -version v1.2.3
//	image release  -binary amd64=dist/…-linux-amd64 -binary arm64=dist/…-linux-arm64 -version v1.2.3 -out dist/v1.2.3
//	image push     -layout dist/v1.2.3/oci -image registry.example.com/webhook-dispatcher[:tag]
//	image verify   -image registry.example.com/webhook-dispatcher:1.2.3 -digest sha256:… -version v1.2.3
//	image registry -addr 127.0.0.1:0 -addr-file bin/registry.addr
//
// build writes one architecture as an image tarball (`docker load`,
// `podman load`, `kind load image-archive`); release writes the multi-arch
// image index of a release as an OCI layout and as a tarball of it; push
// sends that index to a registry (credentials from the Docker config, as
// docker login writes them), and verify pulls it back and checks it as a
// runtime would. registry serves a throwaway registry on loopback, for
// testing push and verify.
//
// `make image`, `make check/image`, `make release` and `make push` run it; it
// is the one definition of the image.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user: numeric, so Kubernetes' runAsNonRoot can verify it
// without a passwd lookup; the name is distroless' for the same uid.
const (
	uid      = 65532
	userName = "nonroot"
	// entrypoint is where the binary lives in the image.
	entrypoint = "/dispatcher"
	repository = "webhook-dispatcher"

	defaultSource = "https://github.com/standmeet/webhook-dispatcher"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: image build|check|release|push|verify|registry [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ExitOnError)
	switch args[0] {
	case "release":
		binaries := map[string]string{}
		fs.Func("binary", "arch=path of a static linux binary, once per architecture", func(v string) error {
			arch, path, ok := strings.Cut(v, "=")
			if !ok || arch == "" || path == "" {
				return fmt.Errorf("want arch=path, got %q", v)
			}
			binaries[arch] = path
			return nil
		})
		version := fs.String("version", "", "the release's version, vMAJOR.MINOR.PATCH[-pre]")
		revision := fs.String("revision", "", "the commit")
		source := fs.String("source", defaultSource, "the repository")
		out := fs.String("out", "", "the release directory: oci/ and the tarball are written there")
		_ = fs.Parse(args[1:])
		return release(binaries, meta{version: *version, revision: *revision, source: *source}, *out, stdout)
	case "push":
		layoutDir := fs.String("layout", "", "the OCI layout make release wrote (dist/<version>/oci)")
		image := fs.String("image", "", "where to push: registry/repository[:tag] (default tag: the release's)")
		_ = fs.Parse(args[1:])
		return push(context.Background(), *layoutDir, *image, stdout)
	case "verify":
		image := fs.String("image", "", "the pushed image reference")
		digest := fs.String("digest", "", "the digest it must have (the index make release wrote)")
		version := fs.String("version", "", "the version its binary must print")
		_ = fs.Parse(args[1:])
		return verify(context.Background(), *image, *digest, *version, stdout)
	case "registry":
		addr := fs.String("addr", "127.0.0.1:0", "loopback address to serve on")
		addrFile := fs.String("addr-file", "", "write the address served on to this file once listening")
		_ = fs.Parse(args[1:])
		return serveRegistry(*addr, *addrFile, stdout)
	case "build":
		binary := fs.String("binary", "", "the static linux binary to put in the image")
		arch := fs.String("arch", "amd64", "the binary's GOARCH")
		version := fs.String("version", "", "the version (label, tag)")
		revision := fs.String("revision", "", "the commit (label)")
		source := fs.String("source", defaultSource, "the repository (label)")
		created := fs.String("created", "", "creation time, RFC 3339 (default: none, so the same inputs give the same image)")
		out := fs.String("o", "bin/dispatcher-image.tar", "the image tarball to write")
		_ = fs.Parse(args[1:])
		var at time.Time
		if *created != "" {
			t, err := time.Parse(time.RFC3339, *created)
			if err != nil {
				return fmt.Errorf("-created: %w", err)
			}
			at = t
		}
		return build(*binary, *arch, *version, *revision, *source, at, *out, stdout)
	case "check":
		image := fs.String("image", "bin/dispatcher-image.tar", "the image tarball to check")
		version := fs.String("version", "", "the version the binary must print (empty: any)")
		_ = fs.Parse(args[1:])
		return check(*image, *version, stdout)
	default:
		return fmt.Errorf("unknown command %q: want build or check", args[0])
	}
}

// entry is one file of the image's only layer.
type entry struct {
	name string
	mode int64
	uid  int
	dir  bool
	body []byte
}

// meta is what the image says about itself (labels, annotations).
type meta struct {
	version, revision, source string
	created                   time.Time
}

func (m meta) labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "dispatcher",
		"org.opencontainers.image.description": "delivers an application's events to webhook receivers: thin, signed (Standard Webhooks), scoped",
		"org.opencontainers.image.source":      m.source,
		"org.opencontainers.image.version":     m.version,
		"org.opencontainers.image.revision":    m.revision,
	}
}

func build(binary, arch, version, revision, source string, created time.Time, out string, stdout io.Writer) error {
	img, err := imageOf(binary, arch, meta{version: version, revision: revision, source: source, created: created})
	if err != nil {
		return err
	}
	// The version's tag, and latest for deploy/docker-compose.yaml.
	tag, err := name.NewTag(repository+":"+tagOf(version), name.WeakValidation)
	if err != nil {
		return err
	}
	latest, err := name.NewTag(repository+":latest", name.WeakValidation)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o750); err != nil {
		return err
	}
	if err := tarball.MultiRefWriteToFile(out, map[name.Reference]v1.Image{tag: img, latest: img}); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "image: wrote %s (%s, linux/%s, %s)\n", out, tag, arch, digest)
	return nil
}

// imageOf builds the image of one architecture around binary: one layer
// onto an empty image, the configuration a runtime needs, and the labels of
// m. Without m.created it has no creation time, so the same binary gives the
// same digest.
func imageOf(binary, arch string, m meta) (v1.Image, error) {
	if binary == "" {
		return nil, errors.New("-binary is required")
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	files := []entry{
		{name: "dispatcher", mode: 0o755, body: bin},
		{name: "etc/", dir: true, mode: 0o755},
		// The user exists by name too, for tools that look it up.
		{name: "etc/passwd", mode: 0o644, body: fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/home/%s:/sbin/nologin\n", userName, uid, uid, userName, userName)},
		{name: "etc/group", mode: 0o644, body: fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\n", userName, uid)},
		{name: "home/", dir: true, mode: 0o755},
		{name: "home/" + userName + "/", dir: true, mode: 0o700, uid: uid},
		{name: "tmp/", dir: true, mode: 0o1777},
	}
	layerTar, err := tarOf(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: m.created}
	cf.Config.User = fmt.Sprintf("%d:%d", uid, uid)
	cf.Config.Entrypoint = []string{entrypoint}
	cf.Config.Cmd = []string{"serve"}
	cf.Config.WorkingDir = "/"
	// Listen on all interfaces inside the container: the binary's defaults
	// are loopback-only, which suits a developer machine, not a container.
	cf.Config.Env = []string{
		"DISPATCHER_GRPC_ADDR=0.0.0.0:7070",
		"DISPATCHER_OPS_ADDR=0.0.0.0:9090",
		"HOME=/home/" + userName,
	}
	// 7070: gRPC API and gRPC health; 9090: operator HTTP (/metrics, /healthz, /riverui/).
	cf.Config.ExposedPorts = map[string]struct{}{"7070/tcp": {}, "9090/tcp": {}}
	cf.Config.Labels = m.labels()
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return img, nil
}

// tagOf makes a version usable as an image tag ([A-Za-z0-9_.-], not leading
// with . or -, at most 128 characters).
func tagOf(version string) string {
	t := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			return r
		default:
			return '_'
		}
	}, version)
	t = strings.TrimLeft(t, ".-")
	if t == "" {
		return "dev"
	}
	return t[:min(len(t), 128)]
}

// tarOf writes files as a tar with fixed owners and times, so the layer's
// digest depends on the contents alone.
func tarOf(files []entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.uid, Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// check reads the tarball as a runtime would: the configured user must be a
// numeric non-root uid, and the entrypoint, unpacked from the layers, must
// run (as that uid, when this runs as root) and print its version.
func check(path, version string, stdout io.Writer) error {
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return checkImage(img, path, version, stdout)
}

// checkImage checks img (named what in messages) as check does.
func checkImage(img v1.Image, what, version string, stdout io.Writer) error {
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	runUID, runGID, err := imageUser(cf)
	if err != nil {
		return err
	}
	if len(cf.Config.Entrypoint) == 0 || !strings.HasPrefix(cf.Config.Entrypoint[0], "/") {
		return fmt.Errorf("the image's entrypoint is %q: want an absolute path", cf.Config.Entrypoint)
	}

	dir, err := os.MkdirTemp("", "image-check")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The uid the binary runs as below must reach it.
	if err := os.Chmod(dir, 0o755); err != nil { //nolint:gosec // a directory others must enter
		return err
	}
	exe := filepath.Join(dir, "entrypoint")
	passwd, err := unpack(img, cf.Config.Entrypoint[0], exe)
	if err != nil {
		return err
	}
	if !strings.Contains(passwd, fmt.Sprintf(":x:%d:", runUID)) {
		return fmt.Errorf("the image's /etc/passwd has no entry for uid %d", runUID)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, append(cf.Config.Entrypoint[1:], "--version")...) //nolint:gosec // running the image's entrypoint is the check
	cmd.Env = cf.Config.Env
	as := "the current user"
	if os.Getuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(runUID), Gid: uint32(runGID)}}
		as = fmt.Sprintf("uid %d", runUID)
	}
	got, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("run the entrypoint --version as %s: %w\n%s", as, err, got)
	}
	line := strings.TrimSpace(string(got))
	if !strings.HasPrefix(line, "dispatcher ") || (version != "" && !strings.Contains(line, " "+version+" ")) {
		return fmt.Errorf("the entrypoint printed %q: want dispatcher %s", line, version)
	}
	fmt.Fprintf(stdout, "image: %s runs as %s, entrypoint %s (run as %s) printed %q\n", what, cf.Config.User, cf.Config.Entrypoint[0], as, line)
	return nil
}

// imageUser is the uid and gid the image runs as: numeric, so that
// Kubernetes' runAsNonRoot can verify it, and not root.
func imageUser(cf *v1.ConfigFile) (uint64, uint64, error) {
	user, group, _ := strings.Cut(cf.Config.User, ":")
	runUID, err := strconv.ParseUint(user, 10, 32)
	if err != nil || runUID == 0 {
		return 0, 0, fmt.Errorf("the image's user is %q: want a numeric uid other than 0", cf.Config.User)
	}
	runGID := runUID
	if group != "" {
		if runGID, err = strconv.ParseUint(group, 10, 32); err != nil {
			return 0, 0, fmt.Errorf("the image's group %q is not numeric", group)
		}
	}
	return runUID, runGID, nil
}

func checkUser(cf *v1.ConfigFile) error {
	_, _, err := imageUser(cf)
	return err
}

// unpack writes the file at path in img's flattened filesystem to dst and
// returns the image's /etc/passwd.
func unpack(img v1.Image, path, dst string) (string, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	want := strings.TrimPrefix(path, "/")
	var found bool
	var passwd string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("unpack: %w", err)
		}
		switch strings.TrimPrefix(h.Name, "./") {
		case want:
			if h.Typeflag != tar.TypeReg || h.Mode&0o111 == 0 {
				return "", fmt.Errorf("the entrypoint %s is not an executable file (mode %o)", path, h.Mode)
			}
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755) //nolint:gosec // an executable, for another uid
			if err != nil {
				return "", err
			}
			_, err = io.Copy(f, tr) //nolint:gosec // the image is our own build's
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return "", err
			}
			found = true
		case "etc/passwd":
			b, err := io.ReadAll(tr)
			if err != nil {
				return "", err
			}
			passwd = string(b)
		}
	}
	if !found {
		return "", fmt.Errorf("the entrypoint %s is not in the image", path)
	}
	return passwd, nil
}
