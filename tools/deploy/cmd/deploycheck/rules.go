package main

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strings"
	"unicode"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
)

// runbookBase is where runbook_url annotations must point.
const runbookBase = "https://github.com/standmeet/webhook-dispatcher/blob/main/docs/operations.md#"

var severities = map[string]bool{"critical": true, "warning": true, "info": true}

func checkRules(l layout, cat *catalogue, p *problems) {
	content, err := os.ReadFile(l.alerts)
	if err != nil {
		p.addErr(l.alerts, err)
		return
	}
	anchors, err := markdownAnchors(l.docs)
	if err != nil {
		p.addErr(l.docs, err)
	}
	checkRuleGroups(l.alerts, content, cat, anchors, p)
}

// checkRuleGroups validates a rule file's content as Prometheus would load it
// (strict fields, PromQL, templates), then applies our own conventions.
func checkRuleGroups(file string, content []byte, cat *catalogue, anchors map[string]bool, p *problems) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	groups, errs := rulefmt.Parse(content, false, model.LegacyValidation, promqlParser, logger)
	for _, err := range errs {
		p.addErr(file, err)
	}
	if groups == nil {
		return
	}
	if len(groups.Groups) == 0 {
		p.add(file, "no rule groups")
	}
	seen := map[string]bool{}
	for _, g := range groups.Groups {
		if len(g.Rules) == 0 {
			p.add(file, "group %q has no rules", g.Name)
		}
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" {
				name = "record " + r.Record
			}
			where := fmt.Sprintf("%s (group %s)", name, g.Name)
			for _, s := range checkExpr(r.Expr, cat) {
				p.add(file, "%s: %s", where, s)
			}
			if r.Alert == "" {
				continue
			}
			if seen[r.Alert] {
				p.add(file, "%s: alert name used twice", where)
			}
			seen[r.Alert] = true
			if !severities[r.Labels["severity"]] {
				p.add(file, "%s: labels.severity must be critical, warning or info, not %q", where, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					p.add(file, "%s: annotation %q is missing", where, a)
				}
			}
			rb := r.Annotations["runbook_url"]
			if rb == "" {
				continue
			}
			u, err := url.Parse(rb)
			if err != nil || !strings.HasPrefix(rb, runbookBase) || u.Fragment == "" {
				p.add(file, "%s: runbook_url %q must start with %s and name an anchor", where, rb, runbookBase)
				continue
			}
			if anchors != nil && !anchors[u.Fragment] {
				p.add(file, "%s: runbook_url anchor #%s does not exist in docs/operations.md", where, u.Fragment)
			}
			if u.Fragment != strings.ToLower(r.Alert) {
				p.add(file, "%s: runbook_url anchor should be #%s (one section per alert, titled by its name)", where, strings.ToLower(r.Alert))
			}
		}
	}
}

var (
	headingRE = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	anchorRE  = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	linkRE    = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// markdownAnchors returns the anchors GitHub generates for a Markdown file's
// headings (lower case, punctuation dropped, spaces to hyphens, -1, -2… for
// repeats) plus explicit <a id="…"> anchors.
func markdownAnchors(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	count := map[string]int{}
	inFence := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range anchorRE.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := githubSlug(m[1])
		if n := count[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		count[slug]++
	}
	return out, sc.Err()
}

func githubSlug(heading string) string {
	// Links keep their text; backticks and other punctuation go.
	heading = linkRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}
