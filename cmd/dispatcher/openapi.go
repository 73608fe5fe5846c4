package main

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/standmeet/webhook-dispatcher/docs"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/openapidoc"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
)

// servedOpenAPI is the document /openapi.json serves: the committed one
// (docs.OpenAPI) with its events typed by the running catalog, generated at
// start-up and again on every catalog swap, so that a client generated from
// it knows this dispatcher's own types.
type servedOpenAPI struct {
	doc atomic.Pointer[[]byte]
}

// newServedOpenAPI generates the document of running's catalog and keeps it
// current across swaps. A swap whose document cannot be generated (a bug: the
// catalog checked its schemas) keeps the previous document and logs why.
func newServedOpenAPI(running *event.Running, warn func(error)) (*servedOpenAPI, error) {
	s := &servedOpenAPI{}
	doc, err := openapidoc.ForCatalog(docs.OpenAPI, running.Catalog())
	if err != nil {
		return nil, fmt.Errorf("openapi document: %w", err)
	}
	s.doc.Store(&doc)
	running.OnSwap(func(c *catalog.Catalog) {
		doc, err := openapidoc.ForCatalog(docs.OpenAPI, c)
		if err != nil {
			warn(fmt.Errorf("openapi document of the new catalog: %w", err))
			return
		}
		s.doc.Store(&doc)
	})
	return s, nil
}

// Document returns the current document; the caller must not modify it.
func (s *servedOpenAPI) Document() []byte { return *s.doc.Load() }

// runOpenAPI implements `dispatcher openapi`: the OpenAPI document of the
// HTTP/JSON API as a dispatcher running the catalog at --catalog serves it at
// /openapi.json, printed without one.
func runOpenAPI(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("openapi", stderr)
	path := fs.String("catalog", osEnviron().get("DISPATCHER_CATALOG"), "the event catalog, as serve -catalog takes it (env DISPATCHER_CATALOG); empty: the default catalog")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("openapi: unexpected argument %q", fs.Arg(0))
	}
	cat := catalog.Default()
	if *path != "" {
		var err error
		if cat, err = catalog.Load(*path); err != nil {
			return fmt.Errorf("openapi: %w", err)
		}
	}
	doc, err := openapidoc.ForCatalog(docs.OpenAPI, cat)
	if err != nil {
		return fmt.Errorf("openapi: %w", err)
	}
	_, err = stdout.Write(doc)
	return err
}
