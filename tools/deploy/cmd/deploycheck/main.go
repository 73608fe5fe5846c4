// Command deploycheck validates everything under deploy/ that a schema
// validator alone cannot: it is run by scripts/check-deploy.sh next to
// kubeconform.
//
//	deploycheck check    [-repo .] [-deploy deploy] -rendered NAME=FILE…   every check below; exit 1 on any problem
//	deploycheck generate [-repo .] [-deploy deploy]   rewrite the chart's copies of the alerts and the dashboard
//	deploycheck kustomize -dev FILE -prod FILE -out DIR
//	                                                  write the Kustomize base and overlays from two helm template renderings
//	deploycheck schemas  -swagger F -crds DIR -out DIR MANIFEST...
//	                                                  kubeconform schemas for the kinds in MANIFEST
//	deploycheck metrics  [-repo .]                    print the metric catalogue found in the source
//
// The checks:
//   - Prometheus rules: parsed and validated as Prometheus does (rulefmt,
//     PromQL parser, annotation templates); every metric they select exists
//     in the dispatcher's source (internal/metrics) with the labels used;
//     severity, summary, description and a runbook_url whose anchor exists
//     in docs/operations.md.
//   - Grafana dashboard: JSON, schemaVersion, the datasource variable, panel
//     layout, and every PromQL query parsed and checked the same way.
//   - Generated files: the chart's files/alerts.yaml and
//     files/dispatcher-dashboard.json are byte-identical to
//     deploy/prometheus/alerts.yaml and deploy/grafana/dispatcher-dashboard.json
//     (one source); deploy/kustomize is what the chart renders for
//     ci/dev-values.yaml and ci/prod-values.yaml (helm-dev, helm-prod).
//   - Kubernetes manifests, each rendered set (-rendered: every helm template
//     value set, every kustomize build overlay): cross-object consistency
//     (selectors, ports, probes, images, security context, env vars known to
//     config.go, the NetworkPolicy's private ranges, the PrometheusRule as a
//     rule file), and kustomize-X equal to helm-X object for object.
//   - docker-compose.yaml: loaded and schema-validated by compose-go.
//   - The image has no Dockerfile: make image (tools/image) is its one
//     definition, and tools/image checks what it builds.
//   - docs/operations.md: documents every flag and environment variable of
//     cmd/dispatcher's configuration, and its #links resolve.
//   - Every file under deploy/ is covered by some check.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "deploycheck:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: deploycheck check|generate|schemas|metrics [flags]")
	}
	cmd, rest := args[0], args[1:]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	repo := fs.String("repo", ".", "repository root")
	deploy := fs.String("deploy", "", "the deploy directory to check (default <repo>/deploy)")
	docs := fs.String("docs", "", "operations guide holding the runbook anchors (default <repo>/docs/operations.md)")
	rendered := map[string]string{}
	fs.Func("rendered", "check: NAME=FILE, a rendered set of manifests (helm-dev, kustomize-prod, …), repeatable", func(v string) error {
		name, file, ok := strings.Cut(v, "=")
		if !ok || name == "" || file == "" {
			return fmt.Errorf("want NAME=FILE, got %q", v)
		}
		rendered[name] = file
		return nil
	})
	devFile := fs.String("dev", "", "kustomize: helm template output for ci/dev-values.yaml")
	prodFile := fs.String("prod", "", "kustomize: helm template output for ci/prod-values.yaml")
	swagger := fs.String("swagger", "", "schemas: Kubernetes' api/openapi-spec/swagger.json")
	crds := fs.String("crds", "", "schemas: directory of CustomResourceDefinition YAML files")
	out := fs.String("out", "", "schemas, kustomize: output directory")
	if err := fs.Parse(rest); err != nil {
		return err
	}
	if *deploy == "" {
		*deploy = filepath.Join(*repo, "deploy")
	}
	if *docs == "" {
		*docs = filepath.Join(*repo, "docs", "operations.md")
	}
	l := layoutOf(*repo, *deploy, *docs)
	l.rendered = rendered

	switch cmd {
	case "kustomize":
		if *devFile == "" || *prodFile == "" || *out == "" {
			return errors.New("kustomize needs -dev, -prod and -out")
		}
		return writeKustomize(*devFile, *prodFile, *out, stdout)
	case "check":
		return runChecks(l, stdout)
	case "generate":
		return writeGenerated(l, stdout)
	case "schemas":
		if *swagger == "" || *crds == "" || *out == "" || fs.NArg() == 0 {
			return fmt.Errorf("schemas needs -swagger, -crds, -out and manifest files")
		}
		return writeSchemas(*swagger, *crds, *out, fs.Args(), stdout)
	case "metrics":
		cat, err := loadCatalogue(*repo)
		if err != nil {
			return err
		}
		names := make([]string, 0, len(cat.series))
		for n := range cat.series {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			s := cat.series[n]
			fmt.Fprintf(stdout, "%-60s %-9s %s\n", n, s.typ, strings.Join(s.labelList(), ","))
		}
		return nil
	default:
		return fmt.Errorf("unknown command %q", cmd)
	}
}

// layout names the files the checks read.
type layout struct {
	repo, deploy, docs string
	alerts             string
	dashboard          string
	compose            string
	chart              string
	chartAlerts        string
	chartDashboard     string
	kustomize          string
	// rendered are the rendered sets of manifests to check, by name.
	rendered map[string]string
}

func layoutOf(repo, deploy, docs string) layout {
	chart := filepath.Join(deploy, "helm", "dispatcher")
	return layout{
		repo: repo, deploy: deploy, docs: docs,
		alerts:         filepath.Join(deploy, "prometheus", "alerts.yaml"),
		dashboard:      filepath.Join(deploy, "grafana", "dispatcher-dashboard.json"),
		compose:        filepath.Join(deploy, "docker-compose.yaml"),
		chart:          chart,
		chartAlerts:    filepath.Join(chart, "files", "alerts.yaml"),
		chartDashboard: filepath.Join(chart, "files", "dispatcher-dashboard.json"),
		kustomize:      filepath.Join(deploy, "kustomize"),
	}
}

// problems collects findings of one check, each prefixed by the file.
type problems struct {
	list []string
}

func (p *problems) add(file, format string, args ...any) {
	s := file + ": " + fmt.Sprintf(format, args...)
	for _, have := range p.list {
		if have == s {
			return // rulefmt, for one, reports some errors twice
		}
	}
	p.list = append(p.list, s)
}

func (p *problems) addErr(file string, err error) {
	if err != nil {
		p.add(file, "%v", err)
	}
}

func runChecks(l layout, stdout io.Writer) error {
	cat, err := loadCatalogue(l.repo)
	if err != nil {
		return err
	}
	checks := []struct {
		name string
		run  func(layout, *catalogue, *problems)
	}{
		{"prometheus rules", checkRules},
		{"grafana dashboard", checkDashboard},
		{"generated manifests", checkGenerated},
		{"kubernetes manifests", checkManifests},
		{"kustomize overlays", checkOverlays},
		{"docker compose", checkCompose},
		{"operations guide", checkDocs},
		{"coverage of deploy/", checkCoverage},
	}
	failed := 0
	for _, c := range checks {
		var p problems
		c.run(l, cat, &p)
		if len(p.list) == 0 {
			fmt.Fprintf(stdout, "ok    %s\n", c.name)
			continue
		}
		failed += len(p.list)
		fmt.Fprintf(stdout, "FAIL  %s\n", c.name)
		for _, s := range p.list {
			fmt.Fprintf(stdout, "      %s\n", s)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d problem(s) in %s", failed, l.deploy)
	}
	return nil
}

// checkOverlays: deploy/kustomize is what the chart renders, and kustomize
// builds from each overlay what Helm renders from its value set.
func checkOverlays(l layout, _ *catalogue, p *problems) {
	dev, prod := l.rendered["helm-dev"], l.rendered["helm-prod"]
	if dev == "" || prod == "" {
		p.add(l.kustomize, "no helm-dev and helm-prod renderings to compare the overlays with (-rendered)")
		return
	}
	checkKustomizeDir(dev, prod, l.kustomize, p)
	for _, env := range []string{"dev", "prod"} {
		built := l.rendered["kustomize-"+env]
		if built == "" {
			p.add(l.kustomize, "no kustomize-%s rendering (-rendered): overlays/%s was not built", env, env)
			continue
		}
		checkSameObjects(l.rendered["helm-"+env], built, p)
	}
}

// checkCoverage fails on any file under deploy/ that no check reads, so a new
// file cannot slip in unvalidated.
func checkCoverage(l layout, _ *catalogue, p *problems) {
	covered := map[string]bool{
		l.alerts: true, l.dashboard: true, l.compose: true,
	}
	err := filepath.WalkDir(l.deploy, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		switch {
		case covered[path]:
		case strings.HasPrefix(path, l.chart+string(filepath.Separator)):
			// helm lint and helm template for each value set, the renderings
			// through kubeconform and checkManifests; files/ by checkGenerated.
		case strings.HasPrefix(path, l.kustomize+string(filepath.Separator)):
			// checkOverlays, and kustomize build through kubeconform and checkManifests.
		default:
			p.add(path, "no validator covers this file: extend tools/deploy/cmd/deploycheck or move it out of deploy/")
		}
		return nil
	})
	p.addErr(l.deploy, err)
}
