package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadmeShowsTheWorkerLoop keeps the README's consume-transform-produce
// loop equal to the one the main job runs: the functions runWorker,
// transaction and transform of worker.go, without their doc comments.
func TestReadmeShowsTheWorkerLoop(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	section := string(readme)
	i := strings.Index(section, "## The consume-transform-produce loop")
	require.GreaterOrEqual(t, i, 0, "the README has no loop section")
	section = section[i:]
	start := strings.Index(section, "```go\n")
	require.GreaterOrEqual(t, start, 0)
	section = section[start+len("```go\n"):]
	shown := section[:strings.Index(section, "```")]

	src, err := os.ReadFile("worker.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "worker.go", src, parser.ParseComments)
	require.NoError(t, err)
	var want strings.Builder
	for _, name := range []string{"runWorker", "transaction", "transform"} {
		found := false
		for _, d := range file.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == name {
				if want.Len() > 0 {
					want.WriteString("\n")
				}
				want.Write(src[fset.Position(fd.Pos()).Offset:fset.Position(fd.End()).Offset])
				want.WriteString("\n")
				found = true
			}
		}
		require.True(t, found, "worker.go has no func %s", name)
	}
	require.Equal(t, want.String(), shown, "README.md's loop differs from examples/ctp/worker.go")
}
