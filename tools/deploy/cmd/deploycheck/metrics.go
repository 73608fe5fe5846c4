package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// series is one name a scrape of the dispatcher can produce.
type series struct {
	typ    string          // counter, gauge, histogram, summary, untyped
	labels map[string]bool // nil: unknown (declared with a non-literal label list)
	from   string          // where it was declared
}

func (s *series) labelList() []string {
	if s.labels == nil {
		return []string{"?"}
	}
	out := make([]string, 0, len(s.labels))
	for l := range s.labels {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

// catalogue is every series name the dispatcher exports: its own metrics,
// found by reading the Go source, plus the Go and process collectors and
// what Prometheus adds itself.
type catalogue struct {
	series map[string]*series
	// anyLabels are series whose labels are not ours to check (up, ALERTS…).
	anyLabels map[string]bool
}

// targetLabels are attached by Prometheus (scrape config, Kubernetes service
// discovery) to every series, so any selector may use them.
var targetLabels = map[string]bool{
	"job": true, "instance": true, "namespace": true, "pod": true, "container": true,
	"service": true, "endpoint": true, "node": true, "cluster": true, "prometheus": true,
}

// loadCatalogue reads every non-test Go file under cmd/dispatcher/, internal/ and pkg/
// for Prometheus metric declarations. Reading the source (rather than
// importing the package) keeps this tool independent of the main module,
// which may be mid-edit, while still catching every rename.
func loadCatalogue(repo string) (*catalogue, error) {
	cat := &catalogue{series: map[string]*series{}, anyLabels: map[string]bool{}}
	found := 0
	// The dispatcher binary's own code: not cmd/dispatcher-bench or tests.
	for _, dir := range []string{filepath.Join("cmd", "dispatcher"), "internal", "pkg"} {
		root := filepath.Join(repo, dir)
		if _, err := os.Stat(root); err != nil {
			continue
		}
		pkgs := map[string][]*ast.File{}
		fset := token.NewFileSet()
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "testdata" || d.Name() == "vendor" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				// A file mid-edit by someone else must not hide the others.
				fmt.Fprintf(os.Stderr, "deploycheck: warning: skipping %s: %v\n", path, err)
				return nil
			}
			pkgs[filepath.Dir(path)] = append(pkgs[filepath.Dir(path)], f)
			return nil
		})
		if err != nil {
			return nil, err
		}
		for dir, files := range pkgs {
			consts := stringConsts(files)
			for _, f := range files {
				found += cat.scanFile(fset, dir, f, consts)
			}
		}
	}
	if found == 0 {
		return nil, fmt.Errorf("no Prometheus metric declarations found under %s/{cmd/dispatcher,internal,pkg}", repo)
	}
	if err := cat.addRuntime(); err != nil {
		return nil, err
	}
	for _, n := range []string{"up", "scrape_duration_seconds", "scrape_samples_scraped",
		"scrape_samples_post_metric_relabeling", "scrape_series_added", "ALERTS", "ALERTS_FOR_STATE"} {
		cat.series[n] = &series{typ: "gauge", from: "prometheus"}
		cat.anyLabels[n] = true
	}
	return cat, nil
}

// stringConsts maps the package-level string constants of one package.
func stringConsts(files []*ast.File) map[string]string {
	out := map[string]string{}
	for _, f := range files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if s, ok := stringLit(vs.Values[i], nil); ok {
							out[name.Name] = s
						}
					}
				}
			}
		}
	}
	return out
}

func stringLit(e ast.Expr, consts map[string]string) (string, bool) {
	switch v := e.(type) {
	case *ast.BasicLit:
		if v.Kind == token.STRING {
			s, err := strconv.Unquote(v.Value)
			return s, err == nil
		}
	case *ast.Ident:
		s, ok := consts[v.Name]
		return s, ok
	case *ast.BinaryExpr:
		if v.Op == token.ADD {
			a, ok1 := stringLit(v.X, consts)
			b, ok2 := stringLit(v.Y, consts)
			return a + b, ok1 && ok2
		}
	case *ast.ParenExpr:
		return stringLit(v.X, consts)
	}
	return "", false
}

// constructors maps client_golang constructors to the metric type they make
// and the position of their label-names argument (-1: none).
var constructors = map[string]struct {
	typ       string
	labelsArg int
}{
	"NewCounter": {"counter", -1}, "NewCounterVec": {"counter", 1}, "NewCounterFunc": {"counter", -1},
	"NewGauge": {"gauge", -1}, "NewGaugeVec": {"gauge", 1}, "NewGaugeFunc": {"gauge", -1},
	"NewHistogram": {"histogram", -1}, "NewHistogramVec": {"histogram", 1},
	"NewSummary": {"summary", -1}, "NewSummaryVec": {"summary", 1},
	"NewUntypedFunc": {"untyped", -1},
}

func (c *catalogue) scanFile(fset *token.FileSet, dir string, f *ast.File, consts map[string]string) int {
	n := 0
	ast.Inspect(f, func(node ast.Node) bool {
		call, ok := node.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		where := fset.Position(call.Pos()).String()
		if sel.Sel.Name == "NewDesc" && len(call.Args) >= 3 {
			name, ok := stringLit(call.Args[0], consts)
			if !ok || !strings.HasPrefix(name, "dispatcher_") {
				return true
			}
			// Const metrics built from a Desc are gauges here; the type only
			// decides the derived names, and a gauge derives none.
			c.add(name, "gauge", labelNames(call.Args[2], consts), where)
			n++
			return true
		}
		ctor, ok := constructors[sel.Sel.Name]
		if !ok || len(call.Args) == 0 {
			return true
		}
		opts := call.Args[0]
		if u, ok := opts.(*ast.UnaryExpr); ok {
			opts = u.X
		}
		lit, ok := opts.(*ast.CompositeLit)
		if !ok {
			return true
		}
		var ns, sub, name string
		for _, el := range lit.Elts {
			kv, ok := el.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			key, _ := kv.Key.(*ast.Ident)
			if key == nil {
				continue
			}
			v, _ := stringLit(kv.Value, consts)
			switch key.Name {
			case "Namespace":
				ns = v
			case "Subsystem":
				sub = v
			case "Name":
				name = v
			}
		}
		full := prometheus.BuildFQName(ns, sub, name)
		if full == "" {
			return true
		}
		labels := map[string]bool{}
		if ctor.labelsArg >= 0 {
			if len(call.Args) <= ctor.labelsArg {
				return true
			}
			labels = labelNames(call.Args[ctor.labelsArg], consts)
		}
		c.add(full, ctor.typ, labels, where)
		n++
		return true
	})
	return n
}

// labelNames reads a []string{...} literal; nil when it is not one.
func labelNames(e ast.Expr, consts map[string]string) map[string]bool {
	if id, ok := e.(*ast.Ident); ok && id.Name == "nil" {
		return map[string]bool{}
	}
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil
	}
	out := map[string]bool{}
	for _, el := range lit.Elts {
		s, ok := stringLit(el, consts)
		if !ok {
			return nil
		}
		out[s] = true
	}
	return out
}

// add records a metric and the series names it produces.
func (c *catalogue) add(name, typ string, labels map[string]bool, where string) {
	with := func(extra string) map[string]bool {
		if labels == nil {
			return nil
		}
		m := map[string]bool{extra: true}
		for l := range labels {
			m[l] = true
		}
		return m
	}
	c.series[name] = &series{typ: typ, labels: labels, from: where}
	switch typ {
	case "histogram":
		c.series[name+"_bucket"] = &series{typ: typ, labels: with("le"), from: where}
		c.series[name+"_sum"] = &series{typ: typ, labels: labels, from: where}
		c.series[name+"_count"] = &series{typ: typ, labels: labels, from: where}
	case "summary":
		c.series[name] = &series{typ: typ, labels: with("quantile"), from: where}
		c.series[name+"_sum"] = &series{typ: typ, labels: labels, from: where}
		c.series[name+"_count"] = &series{typ: typ, labels: labels, from: where}
	}
}

// addRuntime registers the Go and process collectors, as the dispatcher does
// (metrics.RegisterRuntime), and records what they export.
func (c *catalogue) addRuntime() error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mfs, err := reg.Gather()
	if err != nil {
		return fmt.Errorf("gather runtime collectors: %w", err)
	}
	for _, mf := range mfs {
		labels := map[string]bool{}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = true
			}
		}
		typ := map[dto.MetricType]string{
			dto.MetricType_COUNTER: "counter", dto.MetricType_GAUGE: "gauge",
			dto.MetricType_HISTOGRAM: "histogram", dto.MetricType_SUMMARY: "summary",
		}[mf.GetType()]
		if typ == "" {
			typ = "untyped"
		}
		c.add(mf.GetName(), typ, labels, "client_golang collectors")
	}
	// promhttp.HandlerFor with HandlerOpts.Registry set (cmd/dispatcher/serve.go).
	c.add("promhttp_metric_handler_errors_total", "counter", map[string]bool{"cause": true}, "promhttp handler")
	// The process collector exports less on some platforms; these exist on
	// Linux, where the dispatcher runs.
	for _, n := range []string{"process_cpu_seconds_total", "process_resident_memory_bytes",
		"process_virtual_memory_bytes", "process_open_fds", "process_max_fds", "process_start_time_seconds"} {
		if _, ok := c.series[n]; !ok {
			c.add(n, "gauge", map[string]bool{}, "client_golang process collector (linux)")
		}
	}
	return nil
}
