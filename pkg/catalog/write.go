package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteDir writes c's types, the built-in ones excepted, into dir as one
// <type>.json file each: the directory form Load reads. It creates dir if
// need be and never overwrites a file. Starting a catalog of one's own from
// the default one is
//
//	catalog.Default().WriteDir("catalog")
//
// (or `dispatcher catalog export catalog`).
func (c *Catalog) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("catalog: %w", err)
	}
	for _, t := range c.types {
		if t.Builtin {
			continue
		}
		text, err := t.marshal()
		if err != nil {
			return err
		}
		name := filepath.Join(dir, t.Name+".json")
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644) //nolint:gosec // a catalog is configuration, readable like the other files a deployment mounts
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("catalog: %s already exists; not overwritten", name)
		}
		if err != nil {
			return fmt.Errorf("catalog: %w", err)
		}
		_, err = f.Write(text)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("catalog: write %s: %w", name, err)
		}
	}
	return nil
}

// marshal is t as a type file, indented.
func (t *Type) marshal() ([]byte, error) {
	exposure := map[Exposure]string{ExposureWebhook: "webhook", ExposureInternal: "internal", ExposureOperational: "operational"}[t.Exposure]
	tf := typeFile{Name: &t.Name, Description: &t.Description, Exposure: &exposure, Schema: t.Schema, Example: t.Example}
	if t.Scope != ScopeNone {
		s := t.Scope.String()
		tf.Scope = &s
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(tf); err != nil {
		return nil, fmt.Errorf("catalog: %s: %w", t.Name, err)
	}
	return buf.Bytes(), nil
}
