// Command image builds and checks the dispatcher's container image without a
// Docker daemon or a registry: the static binary is appended as one layer
// onto an empty image (go-containerregistry), and the result is written as an
// image tarball that `docker load`, `podman load`, `kind load image-archive`
// and `crane push` take.
//
//	image build -binary bin/linux-amd64/dispatcher -arch amd64 -version v1.2.3 -o bin/dispatcher-image.tar
//	image check -image bin/dispatcher-image.tar -version v1.2.3
//
// `make image` and `make check/image` run it; it is the one definition of
// the image.
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
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: image build|check [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ExitOnError)
	switch args[0] {
	case "build":
		binary := fs.String("binary", "", "the static linux binary to put in the image")
		arch := fs.String("arch", "amd64", "the binary's GOARCH")
		version := fs.String("version", "", "the version (label, tag)")
		revision := fs.String("revision", "", "the commit (label)")
		source := fs.String("source", "https://github.com/standmeet/webhook-dispatcher", "the repository (label)")
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

func build(binary, arch, version, revision, source string, created time.Time, out string, stdout io.Writer) error {
	if binary == "" {
		return errors.New("-binary is required")
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		return err
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
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		return fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: created}
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
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "dispatcher",
		"org.opencontainers.image.description": "delivers an application's events to webhook receivers: thin, signed (Standard Webhooks), scoped",
		"org.opencontainers.image.source":      source,
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.revision":    revision,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return fmt.Errorf("config: %w", err)
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
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	user, group, _ := strings.Cut(cf.Config.User, ":")
	runUID, err := strconv.ParseUint(user, 10, 32)
	if err != nil || runUID == 0 {
		return fmt.Errorf("the image's user is %q: want a numeric uid other than 0", cf.Config.User)
	}
	runGID := runUID
	if group != "" {
		if runGID, err = strconv.ParseUint(group, 10, 32); err != nil {
			return fmt.Errorf("the image's group %q is not numeric", group)
		}
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
	fmt.Fprintf(stdout, "image: %s runs as %s, entrypoint %s (run as %s) printed %q\n", path, cf.Config.User, cf.Config.Entrypoint[0], as, line)
	return nil
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
