package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Environment variables read by this package.
const (
	// EnvBootstrap names the comma-separated bootstrap list of a real Kafka.
	EnvBootstrap = "KSHARE_KAFKA_BOOTSTRAP"
	// EnvJavaRunner names the path of the built Java reference-client jar.
	EnvJavaRunner = "KSHARE_JAVA_RUNNER"
)

// ErrNotConfigured is wrapped by LookupBootstrap and LookupJavaRunner when
// the environment variable they read is unset or empty.
var ErrNotConfigured = errors.New("not configured")

// LookupBootstrap returns the real Kafka bootstrap addresses from
// KSHARE_KAFKA_BOOTSTRAP. The error wraps ErrNotConfigured when the variable
// is unset or empty; it is a plain error when an entry of the list is empty
// or not of the form host:port.
func LookupBootstrap() ([]string, error) {
	raw := strings.TrimSpace(os.Getenv(EnvBootstrap))
	if raw == "" {
		return nil, fmt.Errorf("no real Kafka: %s is %w (start one with integration/kafka/kafka.sh start)",
			EnvBootstrap, ErrNotConfigured)
	}
	return parseSeeds(EnvBootstrap, raw)
}

// parseSeeds splits the comma-separated host:port list raw, read from the
// variable env, and fails on an entry of another form.
func parseSeeds(env, raw string) ([]string, error) {
	var seeds []string
	for _, s := range strings.Split(raw, ",") {
		s = strings.TrimSpace(s)
		i := strings.LastIndexByte(s, ':')
		if i <= 0 || i == len(s)-1 {
			return nil, fmt.Errorf("%s=%q: entry %q is not host:port", env, raw, s)
		}
		seeds = append(seeds, s)
	}
	return seeds, nil
}

// LookupJavaRunner returns the path of the Java runner jar from
// KSHARE_JAVA_RUNNER. The error wraps ErrNotConfigured when the variable is
// unset or empty, and the os.Stat error when the file is not there.
func LookupJavaRunner() (string, error) {
	path := strings.TrimSpace(os.Getenv(EnvJavaRunner))
	if path == "" {
		return "", fmt.Errorf("no Java reference clients: %s is %w (build them with integration/java/run.sh or mvn -f integration/java/pom.xml package)",
			EnvJavaRunner, ErrNotConfigured)
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s names a Java runner that cannot be used: %w", EnvJavaRunner, err)
	}
	return path, nil
}

// Bootstrap returns the real Kafka bootstrap addresses for a test. When none
// is configured it skips the test, or fails it when the CI environment
// variable is "true", because CI must start Kafka (integration/kafka/kafka.sh
// start) and never skip these tests. A malformed value always fails the test.
// The first call of a process warms the cluster up (WarmUp).
func Bootstrap(t testing.TB) []string {
	t.Helper()
	seeds, err := LookupBootstrap()
	if err != nil {
		missing(t, err, "CI must start a real Kafka with integration/kafka/kafka.sh start and export "+EnvBootstrap)
		return nil
	}
	warm(t, seeds)
	return seeds
}

// JavaClients returns the path of the built Java reference-client runner for
// a test, to be run with RunJavaClients. When it is not configured it skips the test,
// or fails it when CI is "true"; a path that does not exist always fails it.
func JavaClients(t testing.TB) string {
	t.Helper()
	path, err := LookupJavaRunner()
	if err != nil {
		missing(t, err, "CI must build integration/java (mvn package) and export "+EnvJavaRunner)
	}
	return path
}

func missing(t testing.TB, err error, ciHint string) {
	t.Helper()
	switch {
	case !errors.Is(err, ErrNotConfigured):
		t.Fatal(err)
	case os.Getenv("CI") == "true":
		t.Fatalf("%v; %s", err, ciHint)
	default:
		t.Skip(err)
	}
}

// RunJavaClients runs the Java reference-client checks of the jar at runner
// against the broker at bootstrap (only the named scenarios, all of them when
// none is named: "features", "txn", "share", "ctp") and returns the runner's
// output.
// It fails the test, showing that output, when java cannot start, a scenario
// fails, or ctx ends first.
func RunJavaClients(ctx context.Context, t testing.TB, runner, bootstrap string, scenarios ...string) string {
	t.Helper()
	args := append([]string{"-jar", runner, bootstrap}, scenarios...)
	cmd := exec.CommandContext(ctx, "java", args...)
	// Give java a moment to exit after being killed before its output pipes are closed on it.
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("Java reference clients against %s: %v\n%s", bootstrap, err, out)
	}
	return string(out)
}
