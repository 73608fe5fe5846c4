package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// composeImage is the tag make image writes into its tarball besides the
// version's, so that `docker load` makes it available to compose.
const composeImage = "webhook-dispatcher:latest"

// checkCompose loads the compose file as `docker compose` does (compose-go:
// the Compose Specification's JSON schema, interpolation, normalisation,
// consistency), then checks the dispatcher services against the binary.
func checkCompose(l layout, _ *catalogue, p *problems) {
	file := l.compose
	content, err := os.ReadFile(file)
	if err != nil {
		p.addErr(file, err)
		return
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		p.addErr(file, err)
		return
	}
	project, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(abs),
		ConfigFiles: []types.ConfigFile{{Filename: abs, Content: content}},
		Environment: types.Mapping{}, // defaults only: no developer's shell leaks in
	}, func(o *loader.Options) { o.ResolvePaths = true })
	if err != nil {
		p.add(file, "does not load: %v", err)
		return
	}
	configSource := readConfigSource(l.repo)
	dispatchers := 0
	for name, svc := range project.Services {
		if svc.Build != nil {
			// One definition of the image: make image (tools/image).
			p.add(file, "service %s: builds an image; run %s, which make image builds and docker load takes, instead", name, composeImage)
		}
		if !strings.HasPrefix(svc.Image, "webhook-dispatcher") {
			continue // postgres and friends
		}
		dispatchers++
		if svc.Image != composeImage {
			p.add(file, "service %s: image %s: want %s, the tag make image gives", name, svc.Image, composeImage)
		}
		if len(svc.Command) == 0 || (svc.Command[0] != "serve" && svc.Command[0] != "migrate") {
			p.add(file, "service %s: command must be serve or migrate, got %q", name, []string(svc.Command))
			continue
		}
		for k := range svc.Environment {
			if !knownEnv[k] && !strings.Contains(configSource, strconv.Quote(k)) {
				p.add(file, "service %s: env %s is not read by cmd/dispatcher", name, k)
			}
		}
		if v := svc.Environment["DISPATCHER_MASTER_KEYS"]; svc.Command[0] == "serve" && (v == nil || *v == "") {
			p.add(file, "service %s: DISPATCHER_MASTER_KEYS is required (serve refuses to start without it)", name)
		}
	}
	if dispatchers == 0 {
		p.add(file, "no service runs %s", composeImage)
	}
}
