package main

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// The operations guide is part of what deploy/ ships: the alerts link into
// it and operators configure from it. checkDocs keeps it honest: every
// environment variable cmd/dispatcher reads and every flag of serve, migrate,
// reseal-secrets and the API client appears in it, and its own #links resolve.
// Its structure too: the contents line links every section in order, and the
// Alerts section holds one runbook per alert and nothing else.

var (
	envLitRE  = regexp.MustCompile(`"((?:DISPATCHER_[A-Z0-9_]+)|DATABASE_URL)"`)
	flagDefRE = regexp.MustCompile(`fs\.[A-Za-z]+\((?:&[^,]+, )?"([a-z][a-z0-9-]*)"`)
	docLinkRE = regexp.MustCompile(`\]\(#([^)]+)\)`)
)

// configFiles declare the operator-facing flags (the endpoints subcommands'
// own flags are documented by `dispatcher endpoints <command> -h`).
var configFiles = []string{"config.go", "migrate.go", "cli_reseal.go", "cli_client.go"}

func checkDocs(l layout, _ *catalogue, p *problems) {
	raw, err := os.ReadFile(l.docs)
	if err != nil {
		p.addErr(l.docs, err)
		return
	}
	doc := string(raw)
	anchors, err := markdownAnchors(l.docs)
	if err != nil {
		p.addErr(l.docs, err)
		return
	}
	for _, m := range docLinkRE.FindAllStringSubmatch(doc, -1) {
		if !anchors[m[1]] {
			p.add(l.docs, "link to #%s, which no heading defines", m[1])
		}
	}

	checkDocsStructure(l, doc, p)

	envs := map[string]bool{}
	flags := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(l.repo, "cmd", "dispatcher", "*.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			p.addErr(f, err)
			continue
		}
		for _, m := range envLitRE.FindAllStringSubmatch(string(src), -1) {
			envs[m[1]] = true
		}
		for _, c := range configFiles {
			if filepath.Base(f) == c {
				for _, m := range flagDefRE.FindAllStringSubmatch(string(src), -1) {
					flags[m[1]] = true
				}
			}
		}
	}
	if len(envs) == 0 || len(flags) == 0 {
		p.add(l.docs, "found no flags or environment variables in cmd/dispatcher: has the configuration moved?")
	}
	var missing []string
	for e := range envs {
		if !regexp.MustCompile(`\b` + e + `\b`).MatchString(doc) {
			missing = append(missing, e)
		}
	}
	for f := range flags {
		if !regexp.MustCompile("`-" + regexp.QuoteMeta(f) + "[`= ]").MatchString(doc) {
			missing = append(missing, "-"+f)
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		p.add(l.docs, "the configuration reference does not mention %s (read by cmd/dispatcher)", m)
	}
}

var alertNameRE = regexp.MustCompile(`(?m)^\s*-\s*alert:\s*(\S+)\s*$`)

// checkDocsStructure: the "Contents:" paragraph links every "## " section,
// in order, and every "### " under "## Alerts" is the runbook of an alert in
// alerts.yaml (other topics there get lost between runbooks).
func checkDocsStructure(l layout, doc string, p *problems) {
	var sections []string
	alertsSection := false
	var alertHeads []string
	inFence := false
	for line := range strings.SplitSeq(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		switch {
		case strings.HasPrefix(line, "## "):
			h := strings.TrimSpace(strings.TrimPrefix(line, "## "))
			sections = append(sections, h)
			alertsSection = h == "Alerts"
		case strings.HasPrefix(line, "### ") && alertsSection:
			alertHeads = append(alertHeads, strings.TrimSpace(strings.TrimPrefix(line, "### ")))
		}
	}

	start := strings.Index(doc, "\nContents: ")
	if start < 0 {
		p.add(l.docs, "no \"Contents: \" paragraph linking the sections")
	} else {
		contents := doc[start+1:]
		if end := strings.Index(contents, "\n\n"); end >= 0 {
			contents = contents[:end]
		}
		var linked []string
		for _, m := range docLinkRE.FindAllStringSubmatch(contents, -1) {
			linked = append(linked, m[1])
		}
		want := make([]string, len(sections))
		for i, h := range sections {
			want[i] = githubSlug(h)
		}
		if strings.Join(linked, " ") != strings.Join(want, " ") {
			p.add(l.docs, "the contents paragraph links %v; the sections, in order, are %v", linked, want)
		}
	}

	raw, err := os.ReadFile(l.alerts)
	if err != nil {
		p.addErr(l.alerts, err)
		return
	}
	alerts := map[string]bool{}
	for _, m := range alertNameRE.FindAllStringSubmatch(string(raw), -1) {
		alerts[m[1]] = true
	}
	for _, h := range alertHeads {
		if !alerts[h] {
			p.add(l.docs, "section \"### %s\" sits under \"## Alerts\", which holds only the alerts' runbooks: give it a \"## \" section of its own", h)
		}
	}
}
