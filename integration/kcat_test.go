package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kshare-go/kshare/broker"
)

// requireTool returns the path of a command-line tool, skipping the test
// without it, or failing it under CI=true.
func requireTool(t *testing.T, name, install string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed, and CI must run this test: %s", name, install)
	}
	t.Skipf("%s is not installed (%s)", name, install)
	return ""
}

// TestKcatProducesAndConsumes runs librdkafka, through kcat, as a second and
// independent client: a few thousand records produced with acks=all and
// idempotence, then consumed back in order.
func TestKcatProducesAndConsumes(t *testing.T) {
	kcat := requireTool(t, "kcat", "apt-get install kcat")
	c, err := broker.NewCluster(broker.Nodes(3), broker.DefaultPartitions(3))
	require.NoError(t, err)
	defer c.Close()
	bootstrap := strings.Join(c.Bootstrap(), ",")

	const n = 5000
	var input bytes.Buffer
	for i := 0; i < n; i++ {
		fmt.Fprintf(&input, "k%d:value-%d\n", i%31, i)
	}
	inputFile := filepath.Join(t.TempDir(), "input.txt")
	require.NoError(t, os.WriteFile(inputFile, input.Bytes(), 0o600))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	produce := exec.CommandContext(ctx, kcat, "-b", bootstrap, "-P", "-t", "kcat-topic", "-K", ":",
		"-X", "enable.idempotence=true", "-X", "acks=all", "-l", inputFile)
	out, err := produce.CombinedOutput()
	require.NoError(t, err, "kcat -P: %s", out)

	consume := exec.CommandContext(ctx, kcat, "-b", bootstrap, "-C", "-t", "kcat-topic", "-o", "beginning",
		"-e", "-q", "-f", "%p %o %k %s\n")
	var stderr bytes.Buffer
	consume.Stderr = &stderr
	out, err = consume.Output()
	require.NoError(t, err, "kcat -C: %s", stderr.String())

	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, n)
	seen := make(map[string]bool, n)
	next := map[string]int64{}
	for _, line := range lines {
		var part string
		var offset int64
		var key, value string
		_, err := fmt.Sscanf(line, "%s %d %s %s", &part, &offset, &key, &value)
		require.NoError(t, err, "line %q", line)
		require.Equal(t, next[part], offset, "offsets of partition %s must be dense", part)
		next[part] = offset + 1
		require.False(t, seen[value], "duplicate %s", value)
		seen[value] = true
	}
	require.Len(t, seen, n)
	require.Len(t, next, 3, "keys spread over every partition")
}
