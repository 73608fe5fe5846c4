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
		for _, port := range svc.Ports {
			if port.HostIP != "127.0.0.1" {
				// Development secrets: nothing of this file faces the network.
				p.add(file, "service %s: port %d is published on %q: publish on 127.0.0.1 only", name, port.Target, port.HostIP)
			}
			if port.Published == "5432" {
				p.add(file, "service %s: publishes host port 5432, which a local Postgres (the one make run uses) holds", name)
			}
		}
		if !strings.HasPrefix(svc.Image, "webhook-dispatcher") {
			continue // postgres and friends
		}
		dispatchers++
		if svc.PullPolicy != types.PullPolicyNever {
			// The image exists only once docker load has taken make image's
			// tarball; a pull would look for it in a registry and fail there.
			p.add(file, "service %s: pull_policy must be never (the image comes from make image and docker load, not a registry)", name)
		}
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
	checkComposeDocs(l, p)
}

// checkComposeDocs: the operations guide's compose section runs what the
// compose file needs, in order (make image, docker load, compose up), and
// nothing it cannot (--build: there is nothing to build).
func checkComposeDocs(l layout, p *problems) {
	raw, err := os.ReadFile(l.docs)
	if err != nil {
		p.addErr(l.docs, err)
		return
	}
	doc := string(raw)
	start := strings.Index(doc, "\n## Local run with Docker Compose\n")
	if start < 0 {
		p.add(l.docs, "no \"## Local run with Docker Compose\" section")
		return
	}
	section := doc[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	if strings.Contains(section, "--build") {
		p.add(l.docs, "the compose section runs --build, but the compose file builds nothing: make image, then docker load")
	}
	last := -1
	for _, step := range []string{"make image", "docker load -i bin/dispatcher-image.tar", "docker compose -f deploy/docker-compose.yaml up"} {
		i := strings.Index(section, step)
		if i < 0 || i < last {
			p.add(l.docs, "the compose section must run, in this order: make image, docker load -i bin/dispatcher-image.tar, docker compose -f deploy/docker-compose.yaml up (%q missing or out of order)", step)
			return
		}
		last = i
	}
}
