package portal

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
)

// Branding is how the portal presents itself: per deployment (Config), and
// per session as overrides of it (SessionRequest). The light and dark
// schemes follow the browser's prefers-color-scheme; the accent colour is
// adjusted in each until text on it and links in it meet WCAG AA contrast,
// so no choice of colour can make the pages unreadable.
type Branding struct {
	// ProductName replaces "Webhooks" in the header and the titles.
	ProductName string `json:"product_name,omitempty"`
	// AccentColor is #rrggbb.
	AccentColor string `json:"accent_color,omitempty"`
}

// Logo is an image the portal serves itself (the CSP allows images from
// the portal only): PNG, JPEG, WebP, GIF or SVG, at most MaxLogoBytes.
type Logo struct {
	Data        []byte
	ContentType string
}

// MaxLogoBytes bounds a logo: it is in every page's header.
const MaxLogoBytes = 256 << 10

// MaxProductNameLen bounds a product name.
const MaxProductNameLen = 60

// DefaultProductName is the header's name without branding.
const DefaultProductName = "Webhooks"

// DefaultAccent is the accent colour without branding.
const DefaultAccent = "#2f5bea"

// Branding field names, under "branding." in a session request.
const (
	FieldProductName = "product_name"
	FieldAccentColor = "accent_color"
)

func (b Branding) validate() []endpoint.FieldViolation {
	var out []endpoint.FieldViolation
	if len(b.ProductName) > MaxProductNameLen {
		out = append(out, endpoint.FieldViolation{Field: FieldProductName, Description: "must be at most " + strconv.Itoa(MaxProductNameLen) + " bytes"})
	} else if !printable(b.ProductName) {
		out = append(out, endpoint.FieldViolation{Field: FieldProductName, Description: "must be printable text (no control characters)"})
	}
	if b.AccentColor != "" {
		if _, ok := parseHex(b.AccentColor); !ok {
			out = append(out, endpoint.FieldViolation{Field: FieldAccentColor, Description: "must be a colour as #rrggbb, like #2f5bea"})
		}
	}
	return out
}

// ValidateBranding checks a deployment's branding; the error names the
// field as flag (the caller's flag names: product name, accent colour).
func ValidateBranding(b Branding) error {
	if v := b.validate(); len(v) > 0 {
		return fmt.Errorf("%s %s", v[0].Field, v[0].Description)
	}
	return nil
}

// ValidateLogo checks a logo by its first bytes and returns it with its
// content type.
func ValidateLogo(data []byte) (Logo, error) {
	if len(data) == 0 {
		return Logo{}, fmt.Errorf("the logo is empty")
	}
	if len(data) > MaxLogoBytes {
		return Logo{}, fmt.Errorf("the logo is %d bytes; at most %d", len(data), MaxLogoBytes)
	}
	ct := http.DetectContentType(data)
	switch {
	case ct == "image/png", ct == "image/jpeg", ct == "image/webp", ct == "image/gif":
	case bytes.Contains(data[:min(len(data), 1024)], []byte("<svg")):
		ct = "image/svg+xml"
	default:
		return Logo{}, fmt.Errorf("the logo must be a PNG, JPEG, WebP, GIF or SVG image, not %s", ct)
	}
	return Logo{Data: data, ContentType: ct}, nil
}

// merged is the deployment's branding with a session's overrides.
func (b Branding) merged(over Branding) Branding {
	if over.ProductName != "" {
		b.ProductName = over.ProductName
	}
	if over.AccentColor != "" {
		b.AccentColor = over.AccentColor
	}
	if b.ProductName == "" {
		b.ProductName = DefaultProductName
	}
	if b.AccentColor == "" {
		b.AccentColor = DefaultAccent
	}
	return b
}

// themeKey is the accent as the theme stylesheet's path names it: six
// lower-case hex digits.
func themeKey(accent string) string {
	c, ok := parseHex(accent)
	if !ok {
		c, _ = parseHex(DefaultAccent)
	}
	return fmt.Sprintf("%02x%02x%02x", c[0], c[1], c[2])
}

type rgb [3]uint8

func parseHex(s string) (rgb, bool) {
	s = strings.TrimPrefix(s, "#")
	if len(s) != 6 {
		return rgb{}, false
	}
	n, err := strconv.ParseUint(s, 16, 32)
	if err != nil {
		return rgb{}, false
	}
	return rgb{uint8(n >> 16), uint8(n >> 8), uint8(n)}, true
}

func (c rgb) hex() string { return fmt.Sprintf("#%02x%02x%02x", c[0], c[1], c[2]) }

// luminance is WCAG's relative luminance.
func (c rgb) luminance() float64 {
	ch := func(v uint8) float64 {
		f := float64(v) / 255
		if f <= 0.04045 {
			return f / 12.92
		}
		return math.Pow((f+0.055)/1.055, 2.4)
	}
	return 0.2126*ch(c[0]) + 0.7152*ch(c[1]) + 0.0722*ch(c[2])
}

// contrast is WCAG's contrast ratio of two colours.
func contrast(a, b rgb) float64 {
	la, lb := a.luminance(), b.luminance()
	if la < lb {
		la, lb = lb, la
	}
	return (la + 0.05) / (lb + 0.05)
}

// mix moves c toward to by t (0..1).
func mix(c, to rgb, t float64) rgb {
	var out rgb
	for i := range c {
		out[i] = uint8(math.Round(float64(c[i]) + (float64(to[i])-float64(c[i]))*t))
	}
	return out
}

// towards moves c toward to in small steps until it has at least ratio
// against bg (always reached: to is black or white).
func towards(c, to, bg rgb, ratio float64) rgb {
	for t := 0.0; t <= 1; t += 0.02 {
		if m := mix(c, to, t); contrast(m, bg) >= ratio {
			return m
		}
	}
	return to
}

// The backgrounds the accent must read on, in each scheme (portal.css).
var (
	lightBg = rgb{0xf6, 0xf7, 0xf9}
	darkBg  = rgb{0x1a, 0x21, 0x2d} // the dark scheme's card
	black   = rgb{}
	white   = rgb{0xff, 0xff, 0xff}
)

// themeCSS is the stylesheet of one accent colour: the accent for links
// and buttons in the light and the dark scheme, each at least 4.5:1
// against its background and against the text on it.
func themeCSS(accent string) []byte {
	c, ok := parseHex(accent)
	if !ok {
		c, _ = parseHex(DefaultAccent)
	}
	light := towards(c, black, lightBg, 4.6)
	dark := towards(c, white, darkBg, 4.6)
	var b bytes.Buffer
	fmt.Fprintf(&b, "/* The accent colour %s, adjusted for contrast. */\n", c.hex())
	fmt.Fprintf(&b, ":root { --accent: %s; --accent-dark: %s; --on-accent: #ffffff; --accent-soft: %s; }\n",
		light.hex(), mix(light, black, 0.15).hex(), mix(light, white, 0.88).hex())
	fmt.Fprintf(&b, "@media (prefers-color-scheme: dark) {\n  :root { --accent: %s; --accent-dark: %s; --on-accent: #0b0f16; --accent-soft: %s; }\n}\n",
		dark.hex(), mix(dark, white, 0.15).hex(), mix(dark, rgb{0x0f, 0x14, 0x1c}, 0.75).hex())
	return b.Bytes()
}

// serveTheme answers /theme/{key}.css: public, and the same for every
// session of an accent, so browsers cache it.
func serveTheme(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimSuffix(r.PathValue("file"), ".css")
	if _, ok := parseHex(key); !ok || len(key) != 6 || !strings.HasSuffix(r.PathValue("file"), ".css") {
		securityHeaders(w, nil)
		http.NotFound(w, r)
		return
	}
	securityHeaders(w, nil)
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "public, max-age=86400")
	_, _ = w.Write(themeCSS("#" + key))
}

// serveLogo answers /brand/logo: the deployment's logo, or 404.
func (p *Portal) serveLogo(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w, nil)
	if len(p.cfg.Logo.Data) == 0 {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", p.cfg.Logo.ContentType)
	h.Set("Cache-Control", "public, max-age=3600")
	// An SVG opened on its own runs no script and loads nothing.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; sandbox")
	_, _ = w.Write(p.cfg.Logo.Data)
}

// serveIcon answers the favicon: the logo, else the portal's own icon.
func (p *Portal) serveIcon(w http.ResponseWriter, r *http.Request) {
	if len(p.cfg.Logo.Data) > 0 {
		p.serveLogo(w, r)
		return
	}
	securityHeaders(w, nil)
	b, err := staticFS.ReadFile("static/icon.svg")
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "public, max-age=86400")
	_, _ = w.Write(b)
}

// Favicon serves /favicon.ico for the port the portal is on: browsers ask
// for it there, outside the portal's path, and would otherwise meet the
// API's 401.
func (p *Portal) Favicon() http.Handler { return http.HandlerFunc(p.serveIcon) }
