// Command deploycheck validates everything under deploy/ that a schema
// validator alone cannot: it is run by scripts/check-deploy.sh next to
// kubeconform.
//
//	deploycheck check    [-repo .] [-deploy deploy]   every check below; exit 1 on any problem
//	deploycheck generate [-repo .] [-deploy deploy]   rewrite the generated manifests
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
//   - Generated files: the PrometheusRule and the dashboard ConfigMap are
//     byte-identical to what generate would write.
//   - Kubernetes manifests: cross-object consistency (selectors, ports,
//     probes, images, security context, env vars known to config.go, the
//     NetworkPolicy's private ranges, the kustomization's resource list).
//   - docker-compose.yaml: loaded and schema-validated by compose-go.
//   - The image has no Dockerfile: make image (tools/image) is its one
//     definition, and tools/image checks what it builds.
//   - docs/operations.md: documents every flag and environment variable of
//     cmd/dispatcher's configuration, and its #links resolve.
//   - Every file under deploy/ is covered by some check.
package main

import (
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
	swagger := fs.String("swagger", "", "schemas: Kubernetes' api/openapi-spec/swagger.json")
	crds := fs.String("crds", "", "schemas: directory of CustomResourceDefinition YAML files")
	out := fs.String("out", "", "schemas: output directory")
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

	switch cmd {
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
	k8s                string
	compose            string
	promRule           string
	dashboardCM        string
}

func layoutOf(repo, deploy, docs string) layout {
	return layout{
		repo: repo, deploy: deploy, docs: docs,
		alerts:      filepath.Join(deploy, "prometheus", "alerts.yaml"),
		dashboard:   filepath.Join(deploy, "grafana", "dispatcher-dashboard.json"),
		k8s:         filepath.Join(deploy, "kubernetes"),
		compose:     filepath.Join(deploy, "docker-compose.yaml"),
		promRule:    filepath.Join(deploy, "kubernetes", "prometheusrule.yaml"),
		dashboardCM: filepath.Join(deploy, "kubernetes", "grafana-dashboard.yaml"),
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
		if covered[path] {
			return nil
		}
		if filepath.Dir(path) == l.k8s && strings.HasSuffix(path, ".yaml") {
			return nil // kubeconform (schemas) + checkManifests (consistency)
		}
		p.add(path, "no validator covers this file: extend tools/deploy/cmd/deploycheck or move it out of deploy/")
		return nil
	})
	p.addErr(l.deploy, err)
}
