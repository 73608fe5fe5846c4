package portal

import (
	"net/url"
	"strings"
)

// The service's lists page forward only, by token. A page of the portal
// pages both ways by carrying, in its address, the tokens of the pages
// before it (trail): Newer goes back one of them, Older forward one. The
// trail is bounded; past the bound, its oldest pages are dropped, and
// Newer from there leads to the first page.

// maxTrail bounds the tokens an address carries.
const maxTrail = 40

// firstPage stands for the first page (no token) in a trail.
const firstPage = "-"

// pager is the links of one page of a list.
type pager struct {
	Newer, Older, Newest string // addresses; "" when there is none
}

// pageLinks builds a list's links: path is the list's address, q its
// query (filters, and page and trail as this page was asked for), next
// the service's token of the page after this one.
func pageLinks(path string, q url.Values, next string) pager {
	cur := q.Get("page")
	var trail []string
	if t := q.Get("trail"); t != "" {
		trail = strings.Split(t, ".")
	}
	link := func(page string, trail []string) string {
		v := url.Values{}
		for k, vs := range q {
			if k != "page" && k != "trail" && k != "done" && len(vs) > 0 && vs[0] != "" {
				v.Set(k, vs[0])
			}
		}
		if page != "" && page != firstPage {
			v.Set("page", page)
		}
		if len(trail) > 0 {
			v.Set("trail", strings.Join(trail, "."))
		}
		if e := v.Encode(); e != "" {
			return path + "?" + e
		}
		return path
	}
	var p pager
	if next != "" {
		back := cur
		if back == "" {
			back = firstPage
		}
		older := append(append([]string(nil), trail...), back)
		if len(older) > maxTrail {
			older = older[len(older)-maxTrail:]
		}
		p.Older = link(next, older)
	}
	if cur != "" {
		p.Newest = link("", nil)
		if len(trail) > 0 {
			p.Newer = link(trail[len(trail)-1], trail[:len(trail)-1])
		} else {
			p.Newer = p.Newest
		}
	}
	return p
}
