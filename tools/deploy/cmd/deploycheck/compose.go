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
	built := 0
	for name, svc := range project.Services {
		if svc.Build != nil {
			built++
			ctxDir := svc.Build.Context
			if st, err := os.Stat(ctxDir); err != nil || !st.IsDir() {
				p.add(file, "service %s: build context %s is not a directory", name, ctxDir)
				continue
			}
			// The context is the directory holding deploy/ (the repository
			// root), as `docker build -f deploy/Dockerfile .` expects.
			absDeploy, _ := filepath.Abs(l.deploy)
			if ctxDir != filepath.Dir(absDeploy) {
				p.add(file, "service %s: the build context must be the repository root %s, not %s", name, filepath.Dir(absDeploy), ctxDir)
			}
			df := filepath.Join(ctxDir, svc.Build.Dockerfile)
			if want, _ := filepath.Abs(l.dockerfile); df != want {
				p.add(file, "service %s: build the image from deploy/Dockerfile, not %s", name, df)
			} else if _, err := os.Stat(df); err != nil {
				p.add(file, "service %s: dockerfile %s does not exist", name, df)
			}
		}
		if !strings.HasPrefix(svc.Image, "webhook-dispatcher") && svc.Build == nil {
			continue // postgres and friends
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
	if built == 0 {
		p.add(file, "no service builds deploy/Dockerfile")
	}
}
