package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// checkDockerfile parses the Dockerfile with BuildKit's own parser and runs
// the lint rules BuildKit applies while parsing (the ones `docker build
// --check` reports for syntax: casing, JSON args, stage names, ...), then
// checks what this image promises: pinned bases, a non-root user, the
// entrypoint and ports, and that the build stage copies every directory the
// binary is built from.
func checkDockerfile(l layout, _ *catalogue, p *problems) {
	file := l.dockerfile
	content, err := os.ReadFile(file)
	if err != nil {
		p.addErr(file, err)
		return
	}
	res, err := parser.Parse(bytes.NewReader(content))
	if err != nil {
		p.add(file, "does not parse: %v", err)
		return
	}
	for _, w := range res.Warnings {
		p.add(file, "line %d: %s", w.Location.Start.Line, w.Short)
	}
	lint := linter.New(&linter.Config{
		ExperimentalAll: true,
		Warn: func(rule, _, url, msg string, loc []parser.Range) {
			line := 0
			if len(loc) > 0 {
				line = loc[0].Start.Line
			}
			p.add(file, "line %d: %s: %s (%s)", line, rule, msg, url)
		},
	})
	stages, metaArgs, err := instructions.Parse(res.AST, lint)
	if err != nil {
		p.add(file, "invalid instructions: %v", err)
		return
	}
	if len(stages) < 2 {
		p.add(file, "want a multi-stage build (builder, then a small final image)")
		return
	}
	args := map[string]string{}
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			if kv.Value != nil {
				args[kv.Key] = *kv.Value
			}
		}
	}
	expand := func(s string) string {
		return os.Expand(s, func(k string) string {
			if v, ok := args[k]; ok {
				return v
			}
			return "${" + k + "}"
		})
	}
	names := map[string]bool{}
	for _, st := range stages {
		base := expand(st.BaseName)
		switch {
		case names[strings.ToLower(base)], base == "scratch":
		case strings.Contains(base, "${"):
			p.add(file, "FROM %s: an ARG without a default decides the base image", st.BaseName)
		case !imagePinned(base):
			p.add(file, "FROM %s: pin the base image to a tag (not latest) or a digest", base)
		}
		if st.Name != "" {
			names[strings.ToLower(st.Name)] = true
		}
	}

	final := stages[len(stages)-1]
	var user string
	var entry, cmd []string
	var exposed []string
	copiedFromBuild := false
	for _, c := range final.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.EntrypointCommand:
			if c.PrependShell {
				p.add(file, "ENTRYPOINT must use the exec form: the final image has no shell")
			}
			entry = c.CmdLine
		case *instructions.CmdCommand:
			if c.PrependShell {
				p.add(file, "CMD must use the exec form: the final image has no shell")
			}
			cmd = c.CmdLine
		case *instructions.ExposeCommand:
			exposed = append(exposed, c.Ports...)
		case *instructions.CopyCommand:
			copiedFromBuild = copiedFromBuild || c.From != ""
		case *instructions.RunCommand:
			p.add(file, "RUN in the final stage: the final image has no shell; do the work in the build stage")
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if user == "" || uid == "root" || uid == "0" {
		p.add(file, "the final stage must switch to a non-root USER (65532:65532)")
	} else if !regexp.MustCompile(`^[1-9][0-9]*$`).MatchString(uid) {
		p.add(file, "USER %s: use a numeric uid so Kubernetes' runAsNonRoot can verify it", user)
	}
	if !slices.Equal(entry, []string{"/dispatcher"}) {
		p.add(file, `ENTRYPOINT must be ["/dispatcher"], got %q`, entry)
	}
	if !slices.Equal(cmd, []string{"serve"}) {
		p.add(file, `CMD must be ["serve"], got %q`, cmd)
	}
	for _, port := range []string{"7070", "9090"} {
		if !slices.Contains(exposed, port) && !slices.Contains(exposed, port+"/tcp") {
			p.add(file, "EXPOSE %s is missing", port)
		}
	}
	if !copiedFromBuild {
		p.add(file, "the final stage must COPY the binary --from the build stage")
	}

	// Every directory the binary's packages (and embedded files) live in must
	// be copied into the build stage, or the image build fails.
	copied := map[string]bool{}
	for _, st := range stages[:len(stages)-1] {
		for _, c := range st.Commands {
			cp, ok := c.(*instructions.CopyCommand)
			if !ok || cp.From != "" {
				continue
			}
			for _, src := range cp.SourcePaths {
				top, _, _ := strings.Cut(strings.TrimPrefix(filepath.ToSlash(filepath.Clean(src)), "./"), "/")
				copied[top] = true
			}
		}
	}
	if copied["."] {
		return
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		if !copied[f] {
			p.add(file, "the build stage does not copy %s", f)
		}
	}
	dirs, err := packageDirs(l.repo)
	if err != nil {
		p.add(file, "cannot list the packages of ./cmd/dispatcher: %v", err)
		return
	}
	for _, d := range dirs {
		if !copied[d] {
			p.add(file, "the build stage does not copy %s/, which ./cmd/dispatcher is built from", d)
		}
	}
}

// packageDirs lists the top-level directories of the main module holding
// packages that ./cmd/dispatcher depends on.
func packageDirs(repo string) ([]string, error) {
	abs, err := filepath.Abs(repo)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("go", "list", "-e", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", "./cmd/dispatcher")
	cmd.Dir = abs
	cmd.Env = append(os.Environ(), "GOWORK=off") // read-only: never -mod=mod on the main module
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	seen := map[string]bool{}
	var dirs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		rel, err := filepath.Rel(abs, line)
		if err != nil || line == "" || strings.HasPrefix(rel, "..") {
			continue
		}
		top, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
		if !seen[top] {
			seen[top] = true
			dirs = append(dirs, top)
		}
	}
	slices.Sort(dirs)
	if len(dirs) == 0 {
		return nil, fmt.Errorf("go list found no packages")
	}
	return dirs, nil
}
