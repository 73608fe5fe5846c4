package main

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

var promqlParser = parser.NewParser(parser.Options{})

// checkExpr parses one PromQL expression and checks it against the
// catalogue: every selected metric exists, every label matched or grouped by
// exists on what is selected, and histogram_quantile keeps the le label.
func checkExpr(expr string, cat *catalogue) []string {
	e, err := promqlParser.ParseExpr(expr)
	if err != nil {
		return []string{fmt.Sprintf("PromQL does not parse: %v", err)}
	}
	var out []string
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			out = append(out, checkSelector(n, cat)...)
		case *parser.AggregateExpr:
			if n.Without || len(n.Grouping) == 0 {
				return nil
			}
			in := outputLabels(n.Expr, cat)
			if in.unknown {
				return nil
			}
			for _, g := range n.Grouping {
				if !in.m[g] {
					out = append(out, fmt.Sprintf("%s by (%s): the aggregated expression has no label %q (it has: %s)",
						n.Op, strings.Join(n.Grouping, ", "), g, setString(in.m)))
				}
			}
		case *parser.Call:
			if n.Func.Name != "histogram_quantile" || len(n.Args) != 2 {
				return nil
			}
			in := outputLabels(n.Args[1], cat)
			if !in.unknown && !in.m["le"] {
				out = append(out, "histogram_quantile over an expression without the le label (aggregate with by (le, ...))")
			}
		}
		return nil
	})
	return out
}

// labelSet is the set of labels an expression's result carries; unknown
// when it cannot be told statically (label_replace, series of unknown labels).
type labelSet struct {
	m       map[string]bool
	unknown bool
}

func (a labelSet) union(b labelSet) labelSet {
	out := labelSet{m: map[string]bool{}, unknown: a.unknown || b.unknown}
	for k := range a.m {
		out.m[k] = true
	}
	for k := range b.m {
		out.m[k] = true
	}
	return out
}

// outputLabels computes the labels of an expression's result.
func outputLabels(e parser.Expr, cat *catalogue) labelSet {
	switch n := e.(type) {
	case *parser.VectorSelector:
		ls := labelSet{m: map[string]bool{}}
		for l := range targetLabels {
			ls.m[l] = true
		}
		names := selectedNames(n, cat)
		if len(names) == 0 {
			ls.unknown = true // reported by checkSelector
		}
		for _, name := range names {
			s := cat.series[name]
			if s.labels == nil || cat.anyLabels[name] {
				ls.unknown = true
				continue
			}
			for l := range s.labels {
				ls.m[l] = true
			}
		}
		return ls
	case *parser.MatrixSelector:
		return outputLabels(n.VectorSelector, cat)
	case *parser.SubqueryExpr:
		return outputLabels(n.Expr, cat)
	case *parser.ParenExpr:
		return outputLabels(n.Expr, cat)
	case *parser.UnaryExpr:
		return outputLabels(n.Expr, cat)
	case *parser.StepInvariantExpr:
		return outputLabels(n.Expr, cat)
	case *parser.NumberLiteral, *parser.StringLiteral:
		return labelSet{m: map[string]bool{}}
	case *parser.AggregateExpr:
		in := outputLabels(n.Expr, cat)
		switch {
		case n.Op == parser.TOPK || n.Op == parser.BOTTOMK || n.Op == parser.LIMITK || n.Op == parser.LIMIT_RATIO:
			return in
		case n.Without:
			for _, g := range n.Grouping {
				delete(in.m, g)
			}
			return in
		default:
			out := labelSet{m: map[string]bool{}, unknown: in.unknown && len(n.Grouping) > 0}
			for _, g := range n.Grouping {
				out.m[g] = true
			}
			if n.Op == parser.COUNT_VALUES {
				out.unknown = true
			}
			return out
		}
	case *parser.Call:
		switch n.Func.Name {
		case "label_replace", "label_join":
			return labelSet{unknown: true}
		case "vector", "time", "absent", "absent_over_time", "scalar", "pi":
			return labelSet{m: map[string]bool{}}
		case "histogram_quantile", "histogram_fraction":
			in := outputLabels(n.Args[len(n.Args)-1], cat)
			delete(in.m, "le")
			return in
		}
		out := labelSet{m: map[string]bool{}}
		for _, a := range n.Args {
			if a.Type() == parser.ValueTypeVector || a.Type() == parser.ValueTypeMatrix {
				out = out.union(outputLabels(a, cat))
			}
		}
		return out
	case *parser.BinaryExpr:
		l, r := outputLabels(n.LHS, cat), outputLabels(n.RHS, cat)
		switch {
		case n.LHS.Type() != parser.ValueTypeVector:
			return r
		case n.RHS.Type() != parser.ValueTypeVector:
			return l
		case n.Op == parser.LOR:
			return l.union(r)
		case n.VectorMatching != nil && n.VectorMatching.Card == parser.CardOneToMany:
			return r
		}
		return l
	}
	return labelSet{unknown: true}
}

func checkSelector(vs *parser.VectorSelector, cat *catalogue) []string {
	names := selectedNames(vs, cat)
	if len(names) == 0 {
		name := vs.Name
		if name == "" {
			name = vs.String()
		}
		return []string{fmt.Sprintf("selects %s, which the dispatcher does not export (see internal/metrics; `deploycheck metrics` lists what exists)", name)}
	}
	var out []string
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName || targetLabels[m.Name] {
			continue
		}
		ok := false
		for _, n := range names {
			s := cat.series[n]
			if cat.anyLabels[n] || s.labels == nil || s.labels[m.Name] {
				ok = true
				break
			}
		}
		if !ok {
			out = append(out, fmt.Sprintf("%s: label %q does not exist on %s (labels: %s)",
				vs.String(), m.Name, strings.Join(names, ", "), setString(cat.series[names[0]].labels)))
		}
	}
	return out
}

// selectedNames returns the catalogue names a selector can select.
func selectedNames(vs *parser.VectorSelector, cat *catalogue) []string {
	if vs.Name != "" {
		if _, ok := cat.series[vs.Name]; ok {
			return []string{vs.Name}
		}
		return nil
	}
	var out []string
	for _, m := range vs.LabelMatchers {
		if m.Name != labels.MetricName {
			continue
		}
		for n := range cat.series {
			if m.Matches(n) {
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out
}

func setString(m map[string]bool) string {
	if m == nil {
		return "unknown"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return "none"
	}
	return strings.Join(keys, ", ")
}

// grafanaVar matches Grafana template variables: $name, ${name}, ${name:fmt}, [[name]].
var grafanaVar = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[^}]*)?\}|\$([A-Za-z0-9_]+)|\[\[([A-Za-z0-9_]+)\]\]`)

// intervalVars are Grafana's built-in duration variables.
var intervalVars = map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}

// expandGrafana replaces template variables with values that keep the query
// parseable, and reports the user-defined variables it used.
func expandGrafana(expr string) (string, []string) {
	var used []string
	out := grafanaVar.ReplaceAllStringFunc(expr, func(m string) string {
		sub := grafanaVar.FindStringSubmatch(m)
		name := sub[1] + sub[2] + sub[3]
		if intervalVars[name] {
			return "5m"
		}
		if strings.HasPrefix(name, "__") {
			return "1"
		}
		used = append(used, name)
		return "placeholder"
	})
	return out, used
}
