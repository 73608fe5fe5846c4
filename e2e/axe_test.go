package e2e

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// axe-core's minified build, vendored from npm with its licence
// (testdata/axe-core/README.md): the tests need no network for it.
var axeSource = sync.OnceValues(func() (string, error) {
	b, err := os.ReadFile("testdata/axe-core/axe.min.js")
	return string(b), err
})

// axeFinding is one rule a page broke, as axe reports it.
type axeFinding struct {
	ID     string `json:"id"`
	Impact string `json:"impact"`
	Help   string `json:"help"`
	Nodes  []struct {
		Target []any  `json:"target"`
		HTML   string `json:"html"`
	} `json:"nodes"`
}

// checkA11y runs axe-core inside the page the browser shows (injected
// through the DevTools protocol, which the page's CSP does not govern)
// against WCAG 2.0, 2.1 and 2.2, A and AA, and fails the test on any
// serious or critical finding. name says which page, in the failure.
func checkA11y(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	src, err := axeSource()
	require.NoError(t, err, "read the vendored axe-core")
	var loaded bool
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`typeof window.axe === "object"`, &loaded)))
	if !loaded {
		require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(src+"\n;true", &loaded)), "inject axe-core")
	}
	var raw json.RawMessage
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`axe.run(document, {
  runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]},
  resultTypes: ["violations"]
}).then(r => JSON.stringify(r.violations))`, &raw, func(p *runtime.EvaluateParams) *runtime.EvaluateParams {
		return p.WithAwaitPromise(true)
	})))
	var s string
	require.NoError(t, json.Unmarshal(raw, &s))
	var found []axeFinding
	require.NoError(t, json.Unmarshal([]byte(s), &found))
	var bad []string
	for _, f := range found {
		if f.Impact != "serious" && f.Impact != "critical" {
			continue
		}
		line := f.Impact + " " + f.ID + ": " + f.Help
		for i, n := range f.Nodes {
			if i == 3 {
				line += "\n    …"
				break
			}
			line += "\n    " + n.HTML
		}
		bad = append(bad, line)
	}
	require.Empty(t, bad, "%s: axe found serious or critical accessibility problems:\n%s", name, strings.Join(bad, "\n"))
}

// colorScheme emulates prefers-color-scheme: "light" or "dark".
func colorScheme(t *testing.T, ctx context.Context, scheme string) {
	t.Helper()
	require.NoError(t, chromedp.Run(ctx, emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{
		{Name: "prefers-color-scheme", Value: scheme},
	})))
}
