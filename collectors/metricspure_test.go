package collectors

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// A scrape calls a collector's Metrics on its latest sample while the
// collector takes its next one (engine.familiesOf), so Metrics must be a
// function of the sample alone: it may not read its receiver, whose fields
// Sample writes. The replay stand-in reads only its spec, fixed at
// construction.
func TestMetricsReadOnlyTheSample(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"replayCollector": true}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Name.Name != "Metrics" || fn.Recv == nil || fn.Body == nil {
				continue
			}
			recvType := fn.Recv.List[0].Type
			if star, ok := recvType.(*ast.StarExpr); ok {
				recvType = star.X
			}
			typeName := ""
			switch rt := recvType.(type) {
			case *ast.Ident:
				typeName = rt.Name
			case *ast.IndexListExpr:
				typeName = rt.X.(*ast.Ident).Name
			case *ast.IndexExpr:
				typeName = rt.X.(*ast.Ident).Name
			}
			checked++
			if len(fn.Recv.List[0].Names) == 0 || allowed[typeName] {
				continue
			}
			recv := fn.Recv.List[0].Names[0].Name
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == recv {
					if typeName == "keyedCollector" && sel.Sel.Name == "c" {
						return true // the adapter passes the call on to the collector's own Metrics
					}
					t.Errorf("%s: %s.Metrics reads %s.%s", fset.Position(sel.Pos()), typeName, recv, sel.Sel.Name)
				}
				return true
			})
		}
	}
	if checked < 15 {
		t.Errorf("checked %d Metrics methods; the collectors have more", checked)
	}
}
