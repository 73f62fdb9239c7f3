package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// TestReadmeScriptCommandsKeepExitCodes: README.md documents exit codes 0
// to 3 and `go run ./examples/ctp`, which exits 1 for every failing
// program. The README must give a command that keeps the program's exit
// code, for each example: run as written (with the binary in a temporary
// directory rather than the checkout), a refused flag exits 2.
func TestReadmeScriptCommandsKeepExitCodes(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	flat := strings.Join(strings.Fields(string(readme)), " ")
	for _, program := range []string{"ctp", "checkpoint"} {
		t.Run(program, func(t *testing.T) {
			m := regexp.MustCompile("`go build -o (\\S+) (\\./examples/" + program + ") && ([^\\s`]+)[^`]*`").FindStringSubmatch(flat)
			require.NotNil(t, m, "README.md gives no `go build -o ... ./examples/%s && ...` command", program)
			require.Equal(t, "./"+m[1], m[3], "the command runs the program it built")
			bin := filepath.Join(t.TempDir(), program)
			cmd := exec.Command("/bin/sh", "-c", "go build -o "+bin+" "+m[2]+" && "+bin+" -records 0")
			cmd.Dir = "../.."
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s", out)
			require.Equal(t, 2, exit.ExitCode(), "README: bad flags exit 2\n%s", out)
			require.Contains(t, string(out), "-records 0: must be at least 1")
		})
	}
}
