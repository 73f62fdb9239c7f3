package benthos

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// The fields both plugins share: how to reach and authenticate to the
// cluster.
const (
	fSeedBrokers = "seed_brokers"
	fClientID    = "client_id"
	fTLS         = "tls"
	fSASL        = "sasl"
	fLedgerTopic = "ledger_topic"
)

// ledgerTopicField is the field both plugins have that turns on the claim
// ledger: exactly-once on a cluster without KIP-1289 (Apache Kafka 4.2 and
// later as released). The input and every output that writes its
// messages must name the same topic.
func ledgerTopicField() *service.ConfigField {
	return service.NewStringField(fLedgerTopic).
		Description("The claim ledger topic, for exactly-once on a cluster without KIP-1289 (Apache Kafka as released): every transaction writes a claim for the records it acknowledges to this topic, and a record delivered again after its acknowledgement was lost is resolved from the committed claims instead of being processed twice. Give the `kshare_share` input and every `kshare_txn` output that writes its messages the same topic; it is created if missing. Empty: acknowledgements commit with KIP-1289, and a cluster without it is refused at connect.").
		Default("").Example("claims")
}

func clientFields() []*service.ConfigField {
	return []*service.ConfigField{
		service.NewStringListField(fSeedBrokers).
			Description("Addresses (host:port) of brokers used to discover the cluster. Items may hold several addresses separated by commas. The input's share group and the output's transactions must be on the same cluster: KIP-1289 commits acknowledgements only inside the cluster that holds the group.").
			Example([]string{"localhost:9092"}),
		service.NewStringField(fClientID).
			Description("The client id sent with every request.").
			Default("kshare-benthos").Advanced(),
		service.NewTLSToggledField(fTLS),
		service.NewObjectListField(fSASL,
			service.NewStringEnumField("mechanism", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512").
				Description("The SASL mechanism."),
			service.NewStringField("username").Description("The user name."),
			service.NewStringField("password").Description("The password.").Secret(),
		).
			Description("SASL mechanisms to authenticate with, in order of preference: the first one the broker supports is used. Empty: no authentication.").
			Optional().Advanced(),
	}
}

// clientConfig is what clientFields parse to.
type clientConfig struct {
	seeds    []string
	clientID string
	tls      *tls.Config // nil: plain text
	sasl     []sasl.Mechanism
}

func parseClientConfig(conf *service.ParsedConfig) (clientConfig, error) {
	var c clientConfig
	raw, err := conf.FieldStringList(fSeedBrokers)
	if err != nil {
		return c, err
	}
	for _, item := range raw {
		for _, addr := range strings.Split(item, ",") {
			if addr = strings.TrimSpace(addr); addr == "" {
				continue
			}
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return c, fmt.Errorf("%s: %q is not host:port: %w", fSeedBrokers, addr, err)
			}
			c.seeds = append(c.seeds, addr)
		}
	}
	if len(c.seeds) == 0 {
		return c, fmt.Errorf("%s: at least one broker address is required", fSeedBrokers)
	}
	if c.clientID, err = conf.FieldString(fClientID); err != nil {
		return c, err
	}
	tlsConf, enabled, err := conf.FieldTLSToggled(fTLS)
	if err != nil {
		return c, err
	}
	if enabled {
		c.tls = tlsConf
	}
	if conf.Contains(fSASL) {
		list, err := conf.FieldObjectList(fSASL)
		if err != nil {
			return c, err
		}
		for i, m := range list {
			mech, err := parseSASL(m)
			if err != nil {
				return c, fmt.Errorf("%s[%d]: %w", fSASL, i, err)
			}
			c.sasl = append(c.sasl, mech)
		}
	}
	return c, nil
}

func parseSASL(conf *service.ParsedConfig) (sasl.Mechanism, error) {
	name, err := conf.FieldString("mechanism")
	if err != nil {
		return nil, err
	}
	user, err := conf.FieldString("username")
	if err != nil {
		return nil, err
	}
	pass, err := conf.FieldString("password")
	if err != nil {
		return nil, err
	}
	if user == "" {
		return nil, errors.New("username is empty")
	}
	switch name {
	case "PLAIN":
		return plain.Auth{User: user, Pass: pass}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("unknown mechanism %q", name)
}

// kgoOpts are the transport options of every client the plugins create.
func (c clientConfig) kgoOpts() []kgo.Opt {
	opts := []kgo.Opt{kgo.ClientID(c.clientID)}
	if dial := testDialer.Load(); dial != nil {
		opts = append(opts, kgo.Dialer(*dial))
	}
	return opts
}

// testDialer, when set by a test, dials every connection of the clients
// created afterwards, so that the test can cut them all at once (a process
// that dies). Atomic: the remains of an abandoned pipeline may still be
// creating clients when the test swaps it.
var testDialer atomic.Pointer[func(ctx context.Context, network, host string) (net.Conn, error)]

// durationField reads a duration field and refuses one that is not
// positive.
func durationField(conf *service.ParsedConfig, name string) (time.Duration, error) {
	d, err := conf.FieldDuration(name)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s: must be positive, got %v", name, d)
	}
	return d, nil
}

// slogFor adapts a Benthos logger so that the SDK's clients log through
// it.
func slogFor(l *service.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(&benthosHandler{l: l})
}

// benthosHandler is a slog.Handler writing to a Benthos logger, whose
// level filter applies.
type benthosHandler struct {
	l     *service.Logger
	attrs []slog.Attr
	group string
}

func (h *benthosHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *benthosHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	write := func(a slog.Attr) {
		if a.Equal(slog.Attr{}) {
			return
		}
		b.WriteByte(' ')
		if h.group != "" {
			b.WriteString(h.group)
			b.WriteByte('.')
		}
		b.WriteString(a.Key)
		b.WriteByte('=')
		b.WriteString(a.Value.String())
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(func(a slog.Attr) bool { write(a); return true })
	switch msg := b.String(); {
	case r.Level >= slog.LevelError:
		h.l.Error(msg)
	case r.Level >= slog.LevelWarn:
		h.l.Warn(msg)
	case r.Level >= slog.LevelInfo:
		h.l.Info(msg)
	default:
		h.l.Debug(msg)
	}
	return nil
}

func (h *benthosHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

func (h *benthosHandler) WithGroup(name string) slog.Handler {
	c := *h
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}
