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
