package kafkatest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kshare-go/kshare/integration/kafkatest"
)

// fakeKafkaScript writes a kafka.sh stand-in that records its arguments in
// a file and exits with code, printing say; it returns the script and the
// file.
func fakeKafkaScript(t *testing.T, code int, say string) (script, argsFile string) {
	t.Helper()
	dir := t.TempDir()
	script = filepath.Join(dir, "kafka.sh")
	argsFile = filepath.Join(dir, "args")
	body := "#!/bin/sh\necho \"$*\" >>'" + argsFile + "'\necho '" + say + "'\nexit " + strconv.Itoa(code) + "\n"
	if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	return script, argsFile
}

func TestLookupBootstrap2FindsTheRepositoryScript(t *testing.T) {
	t.Setenv(kafkatest.EnvBootstrap2, " 127.0.0.1:29192, 127.0.0.1:29194 ")
	t.Setenv(kafkatest.EnvKafkaScript, "")
	c, err := kafkatest.LookupBootstrap2()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"127.0.0.1:29192", "127.0.0.1:29194"}
	if !reflect.DeepEqual(c.Seeds, want) {
		t.Fatalf("seeds = %q, want %q", c.Seeds, want)
	}
}

func TestLookupBootstrap2RejectsBadValues(t *testing.T) {
	script, _ := fakeKafkaScript(t, 0, "")
	t.Setenv(kafkatest.EnvKafkaScript, script)
	cases := map[string]string{
		"127.0.0.1:29192":                           "names 1 brokers",
		"a:1,b:2,c:3":                               "names 3 brokers",
		"a:1,,b:2":                                  "not host:port",
		"127.0.0.1:http,127.0.0.1:29194":            "not a port number",
		"[::1:29192,127.0.0.1:29194":                "node 1's address",
		"127.0.0.1:29192,127.0.0.1:29194,":          "not host:port",
		"127.0.0.1:99999,127.0.0.1:29194":           "not a port number",
		"127.0.0.1:29192 ,127.0.0.1:29194, x:1,y:2": "names 4 brokers",
	}
	for v, want := range cases {
		t.Setenv(kafkatest.EnvBootstrap2, v)
		_, err := kafkatest.LookupBootstrap2()
		if err == nil || errors.Is(err, kafkatest.ErrNotConfigured) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want one saying %q", v, err, want)
		}
	}
}

func TestLookupBootstrap2ChecksTheScript(t *testing.T) {
	t.Setenv(kafkatest.EnvBootstrap2, "127.0.0.1:29192,127.0.0.1:29194")
	t.Setenv(kafkatest.EnvKafkaScript, filepath.Join(t.TempDir(), "absent.sh"))
	_, err := kafkatest.LookupBootstrap2()
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v, want one wrapping os.ErrNotExist", err)
	}
}

func TestBootstrap2(t *testing.T) {
	cases := []struct {
		name, env, ci        string
		wantSkip, wantFailed string
	}{
		{name: "unset outside CI", wantSkip: "no two-node real Kafka"},
		{name: "unset in CI", ci: "true", wantFailed: "kafka.sh start --nodes 2"},
		{name: "malformed outside CI", env: "127.0.0.1:29192", wantFailed: "exactly 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(kafkatest.EnvBootstrap2, c.env)
			t.Setenv("CI", c.ci)
			r := &recorder{}
			if got := kafkatest.Bootstrap2(r); got != nil {
				t.Errorf("cluster = %+v, want none", got)
			}
			if !contains(r.skipped, c.wantSkip) || !contains(r.failed, c.wantFailed) {
				t.Errorf("skipped=%q failed=%q, want skip %q failure %q", r.skipped, r.failed, c.wantSkip, c.wantFailed)
			}
		})
	}
}

func TestTwoNodesRunsKafkaScriptForNode2(t *testing.T) {
	script, argsFile := fakeKafkaScript(t, 0, "kafka ready")
	t.Setenv(kafkatest.EnvKafkaScript, script)
	t.Setenv(kafkatest.EnvBootstrap2, "127.0.0.1:29192,127.0.0.1:29194")
	c, err := kafkatest.LookupBootstrap2()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := c.StopNode2(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.StartNode2(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(argsFile)
	if err != nil {
		t.Fatal(err)
	}
	if want := "stop-node 2 --port 29192\nstart-node 2 --port 29192\n"; string(got) != want {
		t.Fatalf("kafka.sh ran with\n%s\nwant\n%s", got, want)
	}
}

func TestTwoNodesReportsScriptFailure(t *testing.T) {
	script, _ := fakeKafkaScript(t, 1, "node 1 (the controller) is not running")
	t.Setenv(kafkatest.EnvKafkaScript, script)
	t.Setenv(kafkatest.EnvBootstrap2, "127.0.0.1:29192,127.0.0.1:29194")
	c, err := kafkatest.LookupBootstrap2()
	if err != nil {
		t.Fatal(err)
	}
	err = c.StartNode2(t.Context())
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || !strings.Contains(err.Error(), "controller) is not running") {
		t.Fatalf("err = %v, want the script's exit status and output", err)
	}
}
