package portal

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestThemeContrast(t *testing.T) {
	t.Parallel()
	// Whatever the accent, links and button text meet WCAG AA (4.5:1) in
	// both schemes.
	colorRE := regexp.MustCompile(`--accent: (#[0-9a-f]{6}); --accent-dark: #[0-9a-f]{6}; --on-accent: (#[0-9a-f]{6})`)
	for _, accent := range []string{DefaultAccent, "#ffff00", "#000000", "#ffffff", "#777777", "#0e9f6e", "#ff0000", "not a colour"} {
		css := string(themeCSS(accent))
		m := colorRE.FindAllStringSubmatch(css, -1)
		require.Len(t, m, 2, css)
		for i, bg := range []rgb{lightBg, darkBg} {
			c, ok := parseHex(m[i][1])
			require.True(t, ok)
			on, ok := parseHex(m[i][2])
			require.True(t, ok)
			require.GreaterOrEqual(t, contrast(c, bg), 4.5, "%s: the accent on the page, scheme %d", accent, i)
			require.GreaterOrEqual(t, contrast(c, on), 4.5, "%s: text on the accent, scheme %d", accent, i)
		}
	}
	require.Equal(t, "0e9f6e", themeKey("#0E9F6E"))
	require.Equal(t, "2f5bea", themeKey("bad"))
}

func TestValidateLogo(t *testing.T) {
	t.Parallel()
	png := []byte("\x89PNG\r\n\x1a\n0000")
	l, err := ValidateLogo(png)
	require.NoError(t, err)
	require.Equal(t, "image/png", l.ContentType)
	l, err = ValidateLogo([]byte(`<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"></svg>`))
	require.NoError(t, err)
	require.Equal(t, "image/svg+xml", l.ContentType)
	_, err = ValidateLogo([]byte("<html><script>alert(1)</script></html>"))
	require.ErrorContains(t, err, "must be a PNG, JPEG, WebP, GIF or SVG image")
	_, err = ValidateLogo(nil)
	require.ErrorContains(t, err, "empty")
}
