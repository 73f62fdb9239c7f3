package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHandlerHeaders keeps the handler files' opening comments honest:
// every NN_*.go file serves key NN, and its comment names that key, the
// versions handlers.go serves (not what the file once served) and has the
// Behaviour and Skipped sections docs/broker.md promises.
func TestHandlerHeaders(t *testing.T) {
	files, err := filepath.Glob("[0-9][0-9]_*.go")
	require.NoError(t, err)
	require.Len(t, files, len(apis), "one handler file per served key")
	for _, f := range files {
		key, err := strconv.Atoi(f[:2])
		require.NoError(t, err)
		spec, ok := apis[int16(key)]
		require.True(t, ok, "%s: key %d is not served", f, key)
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		if err := checkHandlerHeader(string(src), spec); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestCheckHandlerHeaderRefuses shows the check failing on each kind of
// wrong header.
func TestCheckHandlerHeaderRefuses(t *testing.T) {
	spec := apiSpec{key: 7, min: 1, max: 3}
	good := "package broker\n\n// Thing (key 7).\n//\n// Versions: 1-3. v2 adds more.\n//\n" +
		"// Behaviour:\n//   - does it.\n//\n// Skipped:\n//   - the rest.\n\nimport \"time\"\n"
	require.NoError(t, checkHandlerHeader(good, spec))
	for name, src := range map[string]string{
		"no header":        "package broker\n\nimport \"time\"\n",
		"another key":      strings.Replace(good, "(key 7)", "(key 8)", 1),
		"other versions":   strings.Replace(good, "Versions: 1-3", "Versions: 1-2", 1),
		"one version":      strings.Replace(good, "Versions: 1-3", "Versions: 3", 1),
		"no versions":      strings.Replace(good, "// Versions: 1-3. v2 adds more.\n", "", 1),
		"no behaviour":     strings.Replace(good, "// Behaviour:\n//   - does it.\n", "// Does it.\n", 1),
		"empty behaviour":  strings.Replace(good, "//   - does it.\n", "", 1),
		"no skipped":       strings.Replace(good, "// Skipped:\n//   - the rest.\n", "", 1),
		"header after use": strings.Replace(good, "package broker\n\n", "package broker\n\nimport \"fmt\"\n\n", 1),
	} {
		require.Error(t, checkHandlerHeader(src, spec), name)
	}
	require.NoError(t, checkHandlerHeader(strings.Replace(good, "Versions: 1-3", "Versions: 2", 1), apiSpec{key: 7, min: 2, max: 2}))
}

var (
	headerTitle    = regexp.MustCompile(`^// .*\(key (\d+)\b`)
	headerVersions = regexp.MustCompile(`^// Versions: (\d+)(?:-(\d+))?\b`)
)

// checkHandlerHeader checks the comment that opens a handler file: right
// after the package clause, a title naming spec's key, "Versions:" with
// exactly the versions spec serves, then "Behaviour:" and "Skipped:", each
// with at least one "  - " item.
func checkHandlerHeader(src string, spec apiSpec) error {
	lines := strings.Split(src, "\n")
	if len(lines) < 3 || lines[0] != "package broker" || lines[1] != "" {
		return fmt.Errorf("the file does not start with the package clause and a blank line")
	}
	var header []string
	for _, l := range lines[2:] {
		if !strings.HasPrefix(l, "//") {
			break
		}
		header = append(header, l)
	}
	if len(header) == 0 {
		return fmt.Errorf("no opening comment")
	}
	m := headerTitle.FindStringSubmatch(header[0])
	if m == nil || m[1] != strconv.Itoa(int(spec.key)) {
		return fmt.Errorf("title %q does not name key %d", header[0], spec.key)
	}
	versions, items := "", map[string]int{}
	section := ""
	for _, l := range header[1:] {
		if m := headerVersions.FindStringSubmatch(l); m != nil {
			versions = m[1]
			if m[2] != "" {
				versions += "-" + m[2]
			}
		}
		switch {
		case l == "// Behaviour:" || l == "// Skipped:":
			section = strings.TrimSuffix(strings.TrimPrefix(l, "// "), ":")
			items[section] += 0
		case strings.HasPrefix(l, "//   - ") && section != "":
			items[section]++
		case !strings.HasPrefix(l, "//     "):
			section = ""
		}
	}
	want := strconv.Itoa(int(spec.min))
	if spec.max != spec.min {
		want += "-" + strconv.Itoa(int(spec.max))
	}
	if versions != want {
		return fmt.Errorf("the header says versions %q, handlers.go serves %s", versions, want)
	}
	for _, s := range []string{"Behaviour", "Skipped"} {
		if n, ok := items[s]; !ok || n == 0 {
			return fmt.Errorf("no %q section with items", s+":")
		}
	}
	return nil
}
