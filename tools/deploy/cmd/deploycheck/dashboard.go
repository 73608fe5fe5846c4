package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
)

type dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []templateVar `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type templateVar struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
	Datasource *datasourceRef  `json:"datasource"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Collapsed bool     `json:"collapsed"`
	Panels    []panel  `json:"panels"`
	Targets   []target `json:"targets"`
}

type target struct {
	RefID      string         `json:"refId"`
	Expr       string         `json:"expr"`
	Datasource *datasourceRef `json:"datasource"`
}

// Panel types that draw queries; anything else (text, row, news…) needs none.
var queryPanels = map[string]bool{
	"timeseries": true, "stat": true, "gauge": true, "bargauge": true, "table": true,
	"heatmap": true, "piechart": true, "barchart": true, "histogram": true, "state-timeline": true,
	"status-history": true,
}

const maxConfigMapBytes = 256 * 1024 // kubectl's last-applied annotation limit

func checkDashboard(l layout, cat *catalogue, p *problems) {
	file := l.dashboard
	raw, err := os.ReadFile(file)
	if err != nil {
		p.addErr(file, err)
		return
	}
	if len(raw) > maxConfigMapBytes-4096 {
		p.add(file, "%d bytes: too large to ship in a ConfigMap applied with kubectl (limit ~%d)", len(raw), maxConfigMapBytes)
	}
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		p.add(file, "not valid JSON: %v", err)
		return
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&d); err != nil {
		p.add(file, "unexpected structure: %v", err)
		return
	}
	if d.Title == "" {
		p.add(file, "title is empty")
	}
	if d.UID == "" || len(d.UID) > 40 || !regexp.MustCompile(`^[A-Za-z0-9_-]+$`).MatchString(d.UID) {
		p.add(file, "uid %q must be 1-40 characters of [A-Za-z0-9_-], stable across imports", d.UID)
	}
	if d.SchemaVersion < 38 {
		p.add(file, "schemaVersion %d: want 38 or later", d.SchemaVersion)
	}

	vars := map[string]bool{}
	hasDS := false
	for _, v := range d.Templating.List {
		if vars[v.Name] {
			p.add(file, "template variable %q defined twice", v.Name)
		}
		vars[v.Name] = true
		switch v.Type {
		case "datasource":
			var q string
			_ = json.Unmarshal(v.Query, &q)
			if v.Name == "datasource" && q == "prometheus" {
				hasDS = true
			}
		case "query":
			checkDatasource(file, "variable "+v.Name, v.Datasource, p)
			q := v.Definition
			var obj struct {
				Query string `json:"query"`
			}
			if json.Unmarshal(v.Query, &obj) == nil && obj.Query != "" {
				q = obj.Query
			} else {
				var s string
				if json.Unmarshal(v.Query, &s) == nil && s != "" {
					q = s
				}
			}
			checkVariableQuery(file, v.Name, q, cat, p)
		}
	}
	if !hasDS {
		p.add(file, `templating needs a variable named "datasource" of type datasource with query "prometheus"`)
	}

	ids := map[int]bool{}
	var grid [][24]bool
	var walk func(ps []panel, nested bool)
	walk = func(ps []panel, nested bool) {
		for _, pn := range ps {
			where := fmt.Sprintf("panel %d %q", pn.ID, pn.Title)
			if pn.ID <= 0 || ids[pn.ID] {
				p.add(file, "%s: panel ids must be positive and unique", where)
			}
			ids[pn.ID] = true
			if pn.Title == "" {
				p.add(file, "%s: no title", where)
			}
			if pn.GridPos == nil {
				p.add(file, "%s: no gridPos", where)
			} else {
				g := pn.GridPos
				if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
					p.add(file, "%s: gridPos %+v outside the 24-column grid", where, *g)
				} else if !nested {
					for len(grid) < g.Y+g.H {
						grid = append(grid, [24]bool{})
					}
					overlap := false
					for y := g.Y; y < g.Y+g.H; y++ {
						for x := g.X; x < g.X+g.W; x++ {
							overlap = overlap || grid[y][x]
							grid[y][x] = true
						}
					}
					if overlap {
						p.add(file, "%s: gridPos %+v overlaps another panel", where, *g)
					}
				}
			}
			if pn.Type == "row" {
				if len(pn.Targets) > 0 {
					p.add(file, "%s: a row has no queries", where)
				}
				walk(pn.Panels, true)
				continue
			}
			if !queryPanels[pn.Type] {
				continue
			}
			checkDatasource(file, where, pn.Datasource, p)
			if len(pn.Targets) == 0 {
				p.add(file, "%s: no queries", where)
			}
			refs := map[string]bool{}
			for _, t := range pn.Targets {
				if t.RefID == "" || refs[t.RefID] {
					p.add(file, "%s: refId %q empty or repeated", where, t.RefID)
				}
				refs[t.RefID] = true
				if t.Datasource != nil {
					checkDatasource(file, where, t.Datasource, p)
				}
				if strings.TrimSpace(t.Expr) == "" {
					p.add(file, "%s/%s: empty expr", where, t.RefID)
					continue
				}
				expr, used := expandGrafana(t.Expr)
				for _, u := range used {
					if !vars[u] {
						p.add(file, "%s/%s: uses $%s, which no template variable defines", where, t.RefID, u)
					}
				}
				for _, s := range checkExpr(expr, cat) {
					p.add(file, "%s/%s: %s", where, t.RefID, s)
				}
			}
		}
	}
	walk(d.Panels, false)
	if len(ids) == 0 {
		p.add(file, "no panels")
	}
}

// checkDatasource wants every query to go through the datasource variable,
// so the dashboard works on any Grafana without editing.
func checkDatasource(file, where string, ds *datasourceRef, p *problems) {
	if ds == nil {
		p.add(file, "%s: no datasource (want {type: prometheus, uid: ${datasource}})", where)
		return
	}
	if ds.Type != "prometheus" || (ds.UID != "${datasource}" && ds.UID != "$datasource") {
		p.add(file, "%s: datasource %+v: want {type: prometheus, uid: ${datasource}}", where, *ds)
	}
}

var labelValuesRE = regexp.MustCompile(`^\s*label_values\((?:(.*),)?\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

// checkVariableQuery checks label_values(selector, label) and query_result(expr).
func checkVariableQuery(file, name, q string, cat *catalogue, p *problems) {
	q, _ = expandGrafana(q)
	if m := labelValuesRE.FindStringSubmatch(q); m != nil {
		if strings.TrimSpace(m[1]) == "" {
			return
		}
		problems := checkExpr(m[1], cat)
		for _, s := range problems {
			p.add(file, "variable %s: %s", name, s)
		}
		if e, err := promqlParser.ParseExpr(m[1]); err == nil && len(problems) == 0 {
			if ls := outputLabels(e, cat); !ls.unknown && !ls.m[m[2]] {
				p.add(file, "variable %s: %s has no label %q", name, m[1], m[2])
			}
		}
		return
	}
	if strings.HasPrefix(q, "query_result(") && strings.HasSuffix(q, ")") {
		for _, s := range checkExpr(q[len("query_result("):len(q)-1], cat) {
			p.add(file, "variable %s: %s", name, s)
		}
		return
	}
	if q != "" && !strings.HasPrefix(q, "label_names(") && !strings.HasPrefix(q, "metrics(") {
		p.add(file, "variable %s: unsupported query %q", name, q)
	}
}
