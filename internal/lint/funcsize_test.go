package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Size limits for a function of the module (issue 27 item 5). A function
// over either needs a doc comment containing longOnPurpose that says why it
// must be so (a flat switch over type codes, for one).
const (
	maxFuncLines  = 100 // lines from the func keyword to the closing brace
	maxCyclomatic = 29  // cyclomatic complexity 30 or more fails
	longOnPurpose = "Long on purpose:"
)

// TestFuncSize fails for any non-test function of the module (the bench
// and testcontainers modules and testdata excluded) longer than
// maxFuncLines lines or with cyclomatic complexity above maxCyclomatic whose
// doc comment lacks longOnPurpose.
func TestFuncSize(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "vendor") {
				return filepath.SkipDir
			}
			if rel != "." {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module: bench, testcontainers
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			cyclo := cyclomatic(fn)
			if lines <= maxFuncLines && cyclo <= maxCyclomatic {
				continue
			}
			name := funcName(fn)
			if fn.Doc != nil && strings.Contains(fn.Doc.Text(), longOnPurpose) {
				continue
			}
			t.Errorf("%s: %s has %d lines, cyclomatic complexity %d (limits %d, %d): split it, or say why in its doc comment with %q",
				fset.Position(fn.Pos()), name, lines, cyclo, maxFuncLines, maxCyclomatic, longOnPurpose)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// cyclomatic computes a function's cyclomatic complexity as gocyclo does:
// 1, plus 1 for each if, for, range, non-default case of a switch or
// select, && and ||, counted over the whole body including function
// literals in it.
func cyclomatic(fn *ast.FuncDecl) int {
	c := 1
	ast.Inspect(fn, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			c++
		case *ast.CaseClause:
			if n.List != nil {
				c++
			}
		case *ast.CommClause:
			if n.Comm != nil {
				c++
			}
		case *ast.BinaryExpr:
			if n.Op == token.LAND || n.Op == token.LOR {
				c++
			}
		}
		return true
	})
	return c
}

// funcName names fn as gocyclo does: Name, or (*T).Name / (T).Name for a
// method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	ptr := false
	if s, ok := typ.(*ast.StarExpr); ok {
		ptr, typ = true, s.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr:
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	recv := "?"
	if id, ok := typ.(*ast.Ident); ok {
		recv = id.Name
	}
	if ptr {
		return "(*" + recv + ")." + fn.Name.Name
	}
	return "(" + recv + ")." + fn.Name.Name
}
