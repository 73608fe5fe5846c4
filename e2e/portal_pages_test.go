package e2e

import (
	"fmt"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

var (
	olderRE = regexp.MustCompile(`href="([^"]+)" rel="next"`)
	newerRE = regexp.MustCompile(`href="([^"]+)" rel="prev"`)
	eventRE = regexp.MustCompile(`href="/portal/events/([^"/]+)"`)
	rowRE   = regexp.MustCompile(`<a class="strong" href="/portal/endpoints/([0-9a-f-]{36})"`)
)

// TestPortalPagesBothWays: the events and the endpoints list page forward
// and back, their links as the page wrote them (the events' Older link
// was double-escaped, and page 2 unreachable).
func TestPortalPagesBothWays(t *testing.T) {
	t.Parallel()
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
	const owner = "owner-pages"
	base := "http://" + d.grpcAddr
	for i := range 30 {
		publish(t, d, newEvent(owner, "code.issued", fmt.Sprintf("code://%d", i), `{}`))
		createEndpoint(t, d, owner, fmt.Sprintf("https://example.com/h%d", i), "code.*")
	}
	c := portalClient(t)
	code, _, _ := portalGet(t, c, portalLink(t, d, owner, webhooksv1.PortalAccess_PORTAL_ACCESS_READ))
	require.Equal(t, http.StatusSeeOther, code)

	// follow reads a page and the ids its rows link to.
	follow := func(t *testing.T, u string, re *regexp.Regexp) (string, []string) {
		t.Helper()
		code, _, page := portalGet(t, c, base+u)
		require.Equal(t, http.StatusOK, code, u)
		var ids []string
		for _, m := range re.FindAllStringSubmatch(page, -1) {
			ids = append(ids, m[1])
		}
		return page, ids
	}
	link := func(t *testing.T, re *regexp.Regexp, page string) string {
		t.Helper()
		m := re.FindStringSubmatch(page)
		require.NotNil(t, m, "the page has the link")
		return html.UnescapeString(m[1])
	}
	for _, list := range []struct {
		path string
		rows *regexp.Regexp
		size int
	}{{"/portal/events?type=code.*", eventRE, 25}, {"/portal/?q=example.com", rowRE, 25}} {
		first, firstIDs := follow(t, list.path, list.rows)
		require.Len(t, firstIDs, list.size, list.path)
		older := link(t, olderRE, first)
		require.NotContains(t, older, "%3D", "not escaped twice")
		second, secondIDs := follow(t, older, list.rows)
		require.Len(t, secondIDs, 30-list.size, older)
		for _, id := range secondIDs {
			require.NotContains(t, firstIDs, id, "page 2 is another page")
		}
		require.Nil(t, olderRE.FindStringSubmatch(second), "the last page")
		_, backIDs := follow(t, link(t, newerRE, second), list.rows)
		require.Equal(t, firstIDs, backIDs, "Newer leads back to page 1")
		require.True(t, strings.Contains(older, "code.") || strings.Contains(older, "q=example.com"), "the filter goes along: %s", older)
	}
}
