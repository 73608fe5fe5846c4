package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// The chart carries copies of deploy/prometheus/alerts.yaml and
// deploy/grafana/dispatcher-dashboard.json (Helm reads files only from inside
// the chart), byte for byte: one source for each, and CI tells when they
// drift.

func generated(l layout) (map[string][]byte, error) {
	alerts, err := os.ReadFile(l.alerts)
	if err != nil {
		return nil, err
	}
	dash, err := os.ReadFile(l.dashboard)
	if err != nil {
		return nil, err
	}
	if !json.Valid(dash) {
		return nil, fmt.Errorf("%s: not valid JSON", l.dashboard)
	}
	return map[string][]byte{l.chartAlerts: alerts, l.chartDashboard: dash}, nil
}

func checkGenerated(l layout, _ *catalogue, p *problems) {
	want, err := generated(l)
	if err != nil {
		p.addErr(l.deploy, err)
		return
	}
	for path, content := range want {
		have, err := os.ReadFile(path)
		if err != nil {
			p.add(path, "missing: run scripts/check-deploy.sh --write")
			continue
		}
		if !bytes.Equal(have, content) {
			p.add(path, "out of date with its source: run scripts/check-deploy.sh --write (or edit the source, not this file)")
		}
	}
}

func writeGenerated(l layout, stdout io.Writer) error {
	files, err := generated(l)
	if err != nil {
		return err
	}
	for path, content := range files {
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, content) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, content, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s\n", path)
	}
	return nil
}
