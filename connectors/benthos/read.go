package benthos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/internal/kgoclient"
)

// The fields of kshare_read (seed_brokers, client_id, tls and sasl are the
// shared ones; topics and isolation_level are named as the input's).
const (
	fStartFrom = "start_from"
	fStopAtEnd = "stop_at_end"
)

// The isolation levels of kshare_read.
const (
	readCommitted   = "read_committed"
	readUncommitted = "read_uncommitted"
)

func readSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Stable().
		Categories("Services").
		Summary("Reads Kafka topics as a `read_committed` consumer, without a group: what an exactly-once pipeline committed, to look at or to pass on.").
		Description(`
A plain Kafka reader: it reads every partition of its topics from the start
(or the end), and by default only what transactions committed, as the
readers of a `+"`kshare_txn`"+` output see it. It belongs to no consumer group, commits
no offsets and acknowledges nothing: each run reads the topics again. With
`+"`stop_at_end`"+` it stops once it has read what was there when it started, so
that the stream (and kshare-benthos) ends.

To print what the example pipeline wrote:

`+"```yaml"+`
input:
  kshare_read:
    seed_brokers: [ localhost:9092 ]
    topics: [ orders-enriched ]
    stop_at_end: true
output:
  stdout: {}
`+"```"+`

### Metadata

This input adds the following metadata fields to each message:

`+"```text"+`
- kafka_key
- kafka_topic
- kafka_partition
- kafka_offset
- kafka_timestamp_ms
- kafka_timestamp_unix
- kafka_tombstone_message
- All record headers
`+"```"+`
`).
		Fields(clientFields()...).
		Fields(
			service.NewStringListField(fTopics).
				Description("The topics to read. Items may hold several topics separated by commas.").
				Example([]string{"orders-enriched"}),
			service.NewStringEnumField(fStartFrom, "earliest", "latest").
				Description("Where to start in each partition: its first record, or its end (only what is written from then on).").
				Default("earliest"),
			service.NewStringEnumField(fIsolationLevel, readCommitted, readUncommitted).
				Description("`read_committed` reads what transactions committed and records written outside transactions; `read_uncommitted` also reads the records of open and aborted transactions.").
				Default(readCommitted),
			service.NewBoolField(fStopAtEnd).
				Description("Stop once every partition has been read up to where it ended when the input connected (its last stable offset with `read_committed`, its high watermark otherwise): the stream then ends. With `start_from: latest` that is at once.").
				Default(false),
			service.NewDurationField(fMaxWait).
				Description("How long a broker may hold a fetch while it has no records.").
				Default("500ms").Advanced(),
		)
}

// readConfig is what readSpec parses to.
type readConfig struct {
	client    clientConfig
	topics    []string
	latest    bool
	committed bool
	stopAtEnd bool
	maxWait   time.Duration
}

func parseReadConfig(conf *service.ParsedConfig) (readConfig, error) {
	var c readConfig
	var err error
	if c.client, err = parseClientConfig(conf); err != nil {
		return c, err
	}
	raw, err := conf.FieldStringList(fTopics)
	if err != nil {
		return c, err
	}
	if c.topics = splitList(raw); len(c.topics) == 0 {
		return c, fmt.Errorf("%s: at least one topic is required", fTopics)
	}
	from, err := conf.FieldString(fStartFrom)
	if err != nil {
		return c, err
	}
	c.latest = from == "latest"
	level, err := conf.FieldString(fIsolationLevel)
	if err != nil {
		return c, err
	}
	c.committed = level == readCommitted
	if c.stopAtEnd, err = conf.FieldBool(fStopAtEnd); err != nil {
		return c, err
	}
	if c.maxWait, err = durationField(conf, fMaxWait); err != nil {
		return c, err
	}
	return c, nil
}

// readInput is the kshare_read input. Benthos calls Connect, ReadBatch and
// Close from one goroutine.
type readInput struct {
	cfg readConfig
	log *service.Logger

	cl *kgo.Client
	// With stop_at_end: the partitions not read to their end yet, and the
	// offset each must reach.
	end map[kshare.TopicPartition]int64
}

func newReadInput(conf *service.ParsedConfig, mgr *service.Resources) (*readInput, error) {
	cfg, err := parseReadConfig(conf)
	if err != nil {
		return nil, err
	}
	return &readInput{cfg: cfg, log: mgr.Logger()}, nil
}

// Connect creates the client and, with stop_at_end, lists where each
// partition ends.
func (in *readInput) Connect(ctx context.Context) error {
	if in.cl != nil {
		return nil
	}
	c := in.cfg
	reset := kgo.NewOffset().AtStart()
	if c.latest {
		reset = kgo.NewOffset().AtEnd()
	}
	isolation := kgo.ReadUncommitted()
	if c.committed {
		isolation = kgo.ReadCommitted()
	}
	own := []kgo.Opt{
		kgo.ConsumeTopics(c.topics...),
		kgo.ConsumeResetOffset(reset),
		kgo.FetchIsolationLevel(isolation),
		kgo.FetchMaxWait(c.maxWait),
	}
	if c.stopAtEnd {
		// A transaction's last offset is its marker: without the
		// markers, a partition whose last transaction is its end could
		// never be seen to have reached it.
		own = append(own, kgo.KeepControlRecords())
	}
	if c.client.tls != nil {
		own = append(own, kgo.DialTLSConfig(c.client.tls))
	}
	if len(c.client.sasl) > 0 {
		own = append(own, kgo.SASL(c.client.sasl...))
	}
	settings := kgoclient.Settings{Seeds: c.client.seeds, KgoOpts: c.client.kgoOpts(), Logger: slogFor(in.log)}
	cl, dials, err := settings.NewClient(own...)
	if err != nil {
		return fmt.Errorf("kshare_read: %w", err)
	}
	if c.stopAtEnd {
		lctx, cancel := context.WithTimeout(ctx, readListTimeout)
		err := in.listEnds(lctx, cl)
		cancel()
		if err != nil {
			cl.Close()
			return fmt.Errorf("kshare_read: listing where the partitions of %v end (%s: %v): %w", c.topics, fSeedBrokers, c.client.seeds, dials.Explain(err))
		}
	}
	in.cl = cl
	from := map[bool]string{true: "their end", false: "their start"}[c.latest]
	level := map[bool]string{true: readCommitted, false: readUncommitted}[c.committed]
	until := map[bool]string{true: ", up to where they end now", false: ""}[c.stopAtEnd]
	in.log.Infof("kshare_read: topics %v from %s, %s%s", c.topics, from, level, until)
	return nil
}

// readListTimeout bounds the listing of the partitions' ends: a cluster
// that does not answer fails Connect, which Benthos retries.
const readListTimeout = 30 * time.Second

// listEnds lists where each partition starts and ends, and keeps the
// partitions with something to read.
func (in *readInput) listEnds(ctx context.Context, cl *kgo.Client) error {
	adm := kadm.NewClient(cl)
	list := adm.ListEndOffsets
	if in.cfg.committed {
		list = adm.ListCommittedOffsets // the last stable offsets
	}
	ends, err := list(ctx, in.cfg.topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return err
	}
	starts := ends
	if !in.cfg.latest {
		if starts, err = adm.ListStartOffsets(ctx, in.cfg.topics...); err == nil {
			err = starts.Error()
		}
		if err != nil {
			return err
		}
	}
	in.end = make(map[kshare.TopicPartition]int64)
	ends.Each(func(o kadm.ListedOffset) {
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok && s.Offset < o.Offset {
			in.end[kshare.TopicPartition{Topic: o.Topic, Partition: o.Partition}] = o.Offset
		}
	})
	return nil
}

// ReadBatch returns the records of the next fetch (control records
// aside), or service.ErrEndOfInput once stop_at_end is reached.
func (in *readInput) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	if in.cl == nil {
		return nil, nil, service.ErrNotConnected
	}
	for {
		if in.cfg.stopAtEnd && len(in.end) == 0 {
			return nil, nil, service.ErrEndOfInput
		}
		fetches := in.cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		var errs []error
		fetches.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				errs = append(errs, fmt.Errorf("%s/%d: %w", topic, partition, err))
			}
		})
		var b service.MessageBatch
		fetches.EachRecord(func(r *kgo.Record) {
			in.reached(r)
			if r.Attrs.IsControl() {
				return
			}
			b = append(b, readMessage(r))
		})
		if len(b) > 0 {
			return b, func(context.Context, error) error { return nil }, nil
		}
		if len(errs) > 0 {
			return nil, nil, fmt.Errorf("kshare_read: fetch: %w", errors.Join(errs...))
		}
	}
}

// reached notes, with stop_at_end, that r's partition has been read up to
// r.
func (in *readInput) reached(r *kgo.Record) {
	k := kshare.TopicPartition{Topic: r.Topic, Partition: r.Partition}
	if end, ok := in.end[k]; ok && r.Offset+1 >= end {
		delete(in.end, k)
	}
}

// readMessage is the message of a record read by kshare_read.
func readMessage(r *kgo.Record) *service.Message {
	m := service.NewMessage(r.Value)
	m.MetaSetMut(metaKey, string(r.Key))
	m.MetaSetMut(metaTopic, r.Topic)
	m.MetaSetMut(metaPartition, int64(r.Partition))
	m.MetaSetMut(metaOffset, r.Offset)
	m.MetaSetMut(metaTimestampMs, r.Timestamp.UnixMilli())
	m.MetaSetMut(metaTimestampUnix, r.Timestamp.Unix())
	m.MetaSetMut(metaTombstone, r.Value == nil)
	for _, h := range r.Headers {
		m.MetaSetMut(h.Key, string(h.Value))
	}
	return m
}

// Close closes the client.
func (in *readInput) Close(context.Context) error {
	if in.cl != nil {
		in.cl.Close()
	}
	return nil
}
