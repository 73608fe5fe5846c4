// Package testutil holds the small helpers the tests of several packages
// share, so that each is written once. Rows go through internal/testfactory,
// times through internal/testtime, databases through internal/dbtest.
//
// It is for tests only (a depguard rule keeps it out of the binaries).
package testutil

import (
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"io/fs"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// StringConsts returns the values of the string constants whose names start
// with prefix, declared in the non-test files of the package in the
// current directory (a test's own package), sorted. Tests use it to check
// that a list a package exports (a metric label's values) names every
// constant of its kind, so a new one cannot be left out.
func StringConsts(t *testing.T, prefix string) []string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0) //nolint:staticcheck // one directory, no build tags: ParseDir is enough
	require.NoError(t, err)
	var out []string
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs, ok := spec.(*ast.ValueSpec)
					if !ok {
						continue
					}
					for i, name := range vs.Names {
						if !strings.HasPrefix(name.Name, prefix) || i >= len(vs.Values) {
							continue
						}
						lit, ok := vs.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							continue
						}
						out = append(out, constant.StringVal(constant.MakeFromLiteral(lit.Value, lit.Kind, 0)))
					}
				}
			}
		}
	}
	sort.Strings(out)
	return out
}
