package kgoclient

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestValidate(t *testing.T) {
	s := Defaults()
	require.ErrorContains(t, s.Validate(), "seed brokers")
	SeedBrokers("127.0.0.1:1")(&s)
	require.NoError(t, s.Validate())
	Logger(nil)(&s)
	require.ErrorContains(t, s.Validate(), "nil logger")

	// kgo.NewClient panics on a nil option: Validate refuses it first,
	// alone or in a list.
	for _, opts := range [][]kgo.Opt{{nil}, {kgo.ClientID("x"), nil}} {
		s := Defaults()
		SeedBrokers("127.0.0.1:1")(&s)
		KgoOpts(opts...)(&s)
		require.ErrorContains(t, s.Validate(), "is nil")
	}
}

// Seeds kgo could never dial are refused at once; the forms kgo accepts
// pass (a bare host or IPv6 address gets port 9092).
func TestValidateSeeds(t *testing.T) {
	for seed, bad := range map[string]bool{
		"127.0.0.1:9092": false, "localhost": false, "broker-1.example:19092": false,
		"::1": false, "[::1]:9092": false, "[::1]": false,
		"": true, "  ": true, "::::": true, "host:port": true, "host:0": true, "host:70000": true, ":9092": true,
	} {
		s := Defaults()
		SeedBrokers(seed)(&s)
		if bad {
			require.Error(t, s.Validate(), "seed %q", seed)
		} else {
			require.NoError(t, s.Validate(), "seed %q", seed)
		}
	}
}

// The application's kgo options come after the package's own, so they win.
func TestNewClientOrdersOptions(t *testing.T) {
	s := Defaults()
	SeedBrokers("127.0.0.1:1", "127.0.0.1:2")(&s)
	KgoOpts(kgo.ClientID("from-application"))(&s)
	cl, _, err := s.NewClient(kgo.ClientID("from-package"))
	require.NoError(t, err)
	defer cl.Close()
	require.Equal(t, "from-application", cl.OptValue(kgo.ClientID))
	require.Equal(t, []string{"127.0.0.1:1", "127.0.0.1:2"}, cl.OptValue(kgo.SeedBrokers))
}

func TestNewClientWrapsKgoError(t *testing.T) {
	s := Defaults()
	SeedBrokers("127.0.0.1:1")(&s)
	KgoOpts(kgo.RequiredAcks(kgo.LeaderAck()))(&s) // kgo: idempotency requires acks=all
	_, _, err := s.NewClient()
	require.ErrorContains(t, err, "kgo client")
	require.ErrorContains(t, err, "acks")
}

// captured keeps every record a slog logger receives.
type captured struct{ recs []slog.Record }

func (c *captured) Enabled(context.Context, slog.Level) bool { return true }
func (c *captured) Handle(_ context.Context, r slog.Record) error {
	c.recs = append(c.recs, r)
	return nil
}
func (c *captured) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *captured) WithGroup(string) slog.Handler      { return c }

func TestLoggerMapsLevels(t *testing.T) {
	for lvl, want := range map[slog.Level]kgo.LogLevel{
		slog.LevelDebug:     kgo.LogLevelDebug,
		slog.LevelInfo:      kgo.LogLevelInfo,
		slog.LevelWarn:      kgo.LogLevelWarn,
		slog.LevelError:     kgo.LogLevelError,
		slog.LevelError + 1: kgo.LogLevelNone,
	} {
		l := slog.New(slog.NewTextHandler(&strings.Builder{}, &slog.HandlerOptions{Level: lvl}))
		require.Equal(t, want, slogLogger{l}.Level(), "slog level %v", lvl)
	}

	h := &captured{}
	kl := slogLogger{slog.New(h)}
	kl.Log(kgo.LogLevelWarn, "broker gone", "broker", 3)
	kl.Log(kgo.LogLevelDebug, "detail")
	require.Len(t, h.recs, 2)
	require.Equal(t, slog.LevelWarn, h.recs[0].Level)
	require.Equal(t, "broker gone", h.recs[0].Message)
	attrs := map[string]string{}
	h.recs[0].Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	require.Equal(t, map[string]string{"broker": "3", "component": "kgo"}, attrs)
	require.Equal(t, slog.LevelDebug, h.recs[1].Level)
}

func TestDetail(t *testing.T) {
	msg, empty := "lock expired", ""
	require.Equal(t, ": lock expired", Detail(&msg))
	require.Empty(t, Detail(&empty))
	require.Empty(t, Detail(nil))
}
