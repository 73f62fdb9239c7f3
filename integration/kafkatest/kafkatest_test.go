package kafkatest_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kshare-go/kshare/integration/kafkatest"
)

// recorder is a testing.TB that records Skip and Fatal instead of stopping
// the goroutine, so the decision Bootstrap takes can be inspected.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Skip(args ...any)          { r.skipped = fmt.Sprint(args...) }
func (r *recorder) Fatal(args ...any)         { r.failed = fmt.Sprint(args...) }
func (r *recorder) Fatalf(f string, a ...any) { r.failed = fmt.Sprintf(f, a...) }

func TestLookupBootstrapParsesList(t *testing.T) {
	t.Setenv(kafkatest.EnvBootstrap, " 127.0.0.1:19092, localhost:9092 ")
	seeds, err := kafkatest.LookupBootstrap()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"127.0.0.1:19092", "localhost:9092"}
	if !reflect.DeepEqual(seeds, want) {
		t.Fatalf("seeds = %q, want %q", seeds, want)
	}
}

func TestLookupBootstrapRejectsBadEntries(t *testing.T) {
	for _, v := range []string{"127.0.0.1", "a:1,,b:2", ":9092", "host:"} {
		t.Setenv(kafkatest.EnvBootstrap, v)
		_, err := kafkatest.LookupBootstrap()
		if err == nil || errors.Is(err, kafkatest.ErrNotConfigured) {
			t.Errorf("%q: err = %v, want a format error", v, err)
		}
	}
}

func TestBootstrapSkipsOutsideCI(t *testing.T) {
	t.Setenv(kafkatest.EnvBootstrap, "")
	t.Setenv("CI", "")
	r := &recorder{}
	if seeds := kafkatest.Bootstrap(r); seeds != nil {
		t.Fatalf("seeds = %q, want none", seeds)
	}
	if r.failed != "" || !strings.Contains(r.skipped, "no real Kafka") {
		t.Fatalf("skipped=%q failed=%q, want a skip saying no real Kafka", r.skipped, r.failed)
	}
}

func TestBootstrapFailsInCI(t *testing.T) {
	t.Setenv(kafkatest.EnvBootstrap, "")
	t.Setenv("CI", "true")
	r := &recorder{}
	kafkatest.Bootstrap(r)
	if r.skipped != "" || !strings.Contains(r.failed, "kafka.sh start") {
		t.Fatalf("skipped=%q failed=%q, want a failure naming kafka.sh start", r.skipped, r.failed)
	}
}

func TestBootstrapFailsOnMalformedValueOutsideCI(t *testing.T) {
	t.Setenv(kafkatest.EnvBootstrap, "nohostport")
	t.Setenv("CI", "")
	r := &recorder{}
	kafkatest.Bootstrap(r)
	if r.skipped != "" || !strings.Contains(r.failed, "not host:port") {
		t.Fatalf("skipped=%q failed=%q, want a failure about the format", r.skipped, r.failed)
	}
}

func TestJavaClients(t *testing.T) {
	jar := filepath.Join(t.TempDir(), "runner.jar")
	if err := os.WriteFile(jar, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, env, ci        string
		wantPath             string
		wantSkip, wantFailed string
	}{
		{name: "configured", env: jar, wantPath: jar},
		{name: "unset outside CI", wantSkip: "no Java reference clients"},
		{name: "unset in CI", ci: "true", wantFailed: "CI must build integration/java"},
		{name: "missing file", env: jar + ".gone", wantFailed: "cannot be used"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(kafkatest.EnvJavaRunner, c.env)
			t.Setenv("CI", c.ci)
			r := &recorder{}
			got := kafkatest.JavaClients(r)
			if got != c.wantPath {
				t.Errorf("path = %q, want %q", got, c.wantPath)
			}
			if !contains(r.skipped, c.wantSkip) || !contains(r.failed, c.wantFailed) {
				t.Errorf("skipped=%q failed=%q, want skip %q failure %q", r.skipped, r.failed, c.wantSkip, c.wantFailed)
			}
		})
	}
}

func TestLookupJavaRunnerWrapsStatError(t *testing.T) {
	t.Setenv(kafkatest.EnvJavaRunner, filepath.Join(t.TempDir(), "absent.jar"))
	_, err := kafkatest.LookupJavaRunner()
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v, want one wrapping os.ErrNotExist", err)
	}
}

// contains reports whether got holds want, and that got is empty when
// nothing is wanted.
func contains(got, want string) bool {
	if want == "" {
		return got == ""
	}
	return strings.Contains(got, want)
}
