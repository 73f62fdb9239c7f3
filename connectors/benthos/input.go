package benthos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/acknowledger"
	"github.com/kshare-go/kshare/shareconsumer"
)

// The input's own fields.
const (
	fGroup              = "group"
	fTopics             = "topics"
	fTransactionalID    = "transactional_id"
	fAutoOffsetReset    = "auto_offset_reset"
	fRecordLockDuration = "record_lock_duration"
	fDeliveryCountLimit = "delivery_count_limit"
	fIsolationLevel     = "isolation_level"
	fMaxPollRecords     = "max_poll_records"
	fMaxWait            = "max_wait"
	fRejectAfter        = "reject_after_deliveries"
	fTransactionTimeout = "transaction_timeout"
	fBatching           = "batching"
)

// The metadata every message of kshare_share carries. The names are those
// of Benthos' Kafka inputs, so that mappings written for them work.
const (
	metaKey           = "kafka_key"
	metaTopic         = "kafka_topic"
	metaPartition     = "kafka_partition"
	metaOffset        = "kafka_offset"
	metaTimestampMs   = "kafka_timestamp_ms"
	metaTimestampUnix = "kafka_timestamp_unix"
	metaTombstone     = "kafka_tombstone_message"
	metaDeliveryCount = "kafka_delivery_count"
)

func inputSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Stable().
		Categories("Services").
		Summary("Reads a Kafka share group (KIP-932) whose acknowledgements commit exactly once: with the output of the same messages when they go to a `kshare_txn` output, in an acknowledgement-only transaction otherwise.").
		Description(`
This input is a kshare share consumer in transactional mode: it never
acknowledges a record by itself. Each message carries, in its context, the
pending acknowledgement of the record it was read from.

- A `+"`kshare_txn`"+` output writes a batch in one Kafka transaction that also
  carries the acknowledgements of the records the batch came from (KIP-1289):
  the output and the acknowledgements commit together or not at all.
- When the batch's acknowledgement reaches this input, it resolves what no
  output did: records whose messages were dropped (a mapping's `+"`deleted()`"+`, a
  filter) are accepted in an acknowledgement-only transaction of the input's own
  (its `+"`transactional_id`"+`); records whose messages were nacked (a rejected
  message, a failed output) are released, so that the group delivers them again
  at once, or rejected (archived) once delivered `+"`reject_after_deliveries`"+`
  times.

Every record's acknowledgement is committed exactly once, by one of the two.

With any output other than `+"`kshare_txn`"+` the input still works, but
at-least-once: the records are accepted in the input's own transaction after the
output has written them, so a crash between the two delivers them again.

Exactly-once also needs each record's messages to reach the output in one batch.
Processors that keep messages one for one (mappings, mutations, filters) and
splits that stay in one batch do; processors that merge messages (`+"`archive`"+`)
keep the context of one of them only, and the records merged away are accepted
after the output, at-least-once. The connector's README states the whole
argument.

### Locks

A delivered record is locked to this consumer for the group's
`+"`share.record.lock.duration.ms`"+` (`+"`record_lock_duration`"+` sets it). Once its
acknowledgement joins a transaction the consumer renews the lock until the
transaction ends; before that, the message must reach the output within the
lock, or the record is delivered again and the late message is skipped by the
output.

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
- kafka_delivery_count
- All record headers
`+"```"+`
`).
		Fields(clientFields()...).
		Fields(
			service.NewStringField(fGroup).
				Description("The share group to join."),
			service.NewStringListField(fTopics).
				Description("The topics to read. Items may hold several topics separated by commas.").
				Example([]string{"orders"}),
			service.NewStringField(fTransactionalID).
				Description("The transactional id of the input's own acknowledger, which commits the acknowledgements that no output committed (dropped and nacked messages). Give each running instance its own, and keep it across restarts: a newer instance with the same id fences the older one, whose input then gives back the records it holds and ends (its stream stops)."),
			service.NewStringField(fAutoOffsetReset).
				Description("Sets the group's `share.auto.offset.reset` before joining: where the group starts reading a partition it has no state for (`earliest`, `latest`, or `by_duration:<ISO-8601 duration>`). Empty leaves the group's setting (Kafka's default is `latest`: records written before the group began are not read).").
				Default("").Example("earliest"),
			service.NewDurationField(fRecordLockDuration).
				Description("Sets the group's `share.record.lock.duration.ms` before joining: how long a delivered record is locked to this consumer. Empty leaves the group's setting.").
				Optional().Advanced(),
			service.NewIntField(fDeliveryCountLimit).
				Description("Sets the group's `share.delivery.count.limit` before joining: how often a record is delivered before the group archives it. 0 leaves the group's setting.").
				Default(0).Advanced(),
			service.NewStringEnumField(fIsolationLevel, "", shareconsumer.ReadCommitted, shareconsumer.ReadUncommitted).
				Description("Sets the group's `share.isolation.level` before joining. `read_committed` reads only committed transactions (what a pipeline reading another exactly-once pipeline's output wants). Empty leaves the group's setting.").
				Default("").Advanced(),
			service.NewIntField(fMaxPollRecords).
				Description("The most records one broker hands out per fetch.").
				Default(int(shareconsumer.DefaultMaxPollRecords)),
			service.NewDurationField(fMaxWait).
				Description("How long a broker may hold a fetch while it has no records.").
				Default(shareconsumer.DefaultMaxWait.String()).Advanced(),
			service.NewIntField(fRejectAfter).
				Description("On a nack, a record delivered at least this many times is rejected (archived, never delivered again) instead of released. 0 always releases; the group's delivery count limit then archives a record that keeps failing.").
				Default(0),
			service.NewDurationField(fTransactionTimeout).
				Description("The transaction timeout of the input's acknowledger; it also bounds each of its commits.").
				Default("30s").Advanced(),
			service.NewBatchPolicyField(fBatching).
				Description("Groups records into batches. With no policy, each batch is what one poll returned."),
			ledgerTopicField(),
		)
}

// inputConfig is what inputSpec parses to.
type inputConfig struct {
	client      clientConfig
	group       string
	topics      []string
	txnID       string
	groupConfig shareconsumer.GroupConfig
	maxPoll     int32
	maxWait     time.Duration
	rejectAfter int
	txnTimeout  time.Duration
	batching    service.BatchPolicy
	ledgerTopic string // "": KIP-1289
}

func parseInputConfig(conf *service.ParsedConfig) (inputConfig, error) {
	var c inputConfig
	var err error
	if c.client, err = parseClientConfig(conf); err != nil {
		return c, err
	}
	if c.group, err = conf.FieldString(fGroup); err != nil {
		return c, err
	}
	if c.group == "" {
		return c, fmt.Errorf("%s: the share group is required", fGroup)
	}
	raw, err := conf.FieldStringList(fTopics)
	if err != nil {
		return c, err
	}
	c.topics = splitList(raw)
	if len(c.topics) == 0 {
		return c, fmt.Errorf("%s: at least one topic is required", fTopics)
	}
	if c.txnID, err = conf.FieldString(fTransactionalID); err != nil {
		return c, err
	}
	if c.txnID == "" {
		return c, fmt.Errorf("%s: required (the id of the acknowledger that commits the acknowledgements of dropped and nacked messages; one per running instance)", fTransactionalID)
	}
	if c.groupConfig.AutoOffsetReset, err = conf.FieldString(fAutoOffsetReset); err != nil {
		return c, err
	}
	if conf.Contains(fRecordLockDuration) {
		if c.groupConfig.RecordLockDuration, err = durationField(conf, fRecordLockDuration); err != nil {
			return c, err
		}
	}
	limit, err := conf.FieldInt(fDeliveryCountLimit)
	if err != nil {
		return c, err
	}
	if limit < 0 {
		return c, fmt.Errorf("%s: must not be negative, got %d", fDeliveryCountLimit, limit)
	}
	c.groupConfig.DeliveryCountLimit = int32(limit)
	if c.groupConfig.IsolationLevel, err = conf.FieldString(fIsolationLevel); err != nil {
		return c, err
	}
	n, err := conf.FieldInt(fMaxPollRecords)
	if err != nil {
		return c, err
	}
	if n < 1 || n > 1<<20 {
		return c, fmt.Errorf("%s: must be between 1 and %d, got %d", fMaxPollRecords, 1<<20, n)
	}
	c.maxPoll = int32(n)
	if c.maxWait, err = durationField(conf, fMaxWait); err != nil {
		return c, err
	}
	if c.rejectAfter, err = conf.FieldInt(fRejectAfter); err != nil {
		return c, err
	}
	if c.rejectAfter < 0 {
		return c, fmt.Errorf("%s: must not be negative, got %d", fRejectAfter, c.rejectAfter)
	}
	if c.txnTimeout, err = durationField(conf, fTransactionTimeout); err != nil {
		return c, err
	}
	if c.batching, err = conf.FieldBatchPolicy(fBatching); err != nil {
		return c, err
	}
	if c.batching.Count < 0 || c.batching.ByteSize < 0 {
		return c, fmt.Errorf("%s: count and byte_size must not be negative", fBatching)
	}
	if c.ledgerTopic, err = conf.FieldString(fLedgerTopic); err != nil {
		return c, err
	}
	return c, nil
}

// splitList splits comma-separated items and drops empty ones.
func splitList(items []string) []string {
	var out []string
	for _, item := range items {
		for _, s := range strings.Split(item, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// shareInput is the kshare_share input. Benthos calls Connect, ReadBatch
// and Close from one goroutine; the AckFuncs run on others and reach only
// the ledger and the acker.
type shareInput struct {
	cfg inputConfig
	log *service.Logger
	res *service.Resources

	cons    *shareconsumer.Consumer
	ack     *acknowledger.Acknowledger
	ledger  *ledger
	acker   *acker
	batcher *service.Batcher // nil for a noop policy

	// queued are delivered records not yet put in a batch; inBatch those
	// added to the batcher since its last flush.
	queued  []*pendingAck
	inBatch []*pendingAck

	metrics *inputMetrics

	// The end of an input that can commit nothing more (giveUp): why,
	// once it has ended, and the closing of its consumer, which gives
	// back what it holds.
	ended     atomic.Pointer[error]
	endOnce   sync.Once
	consOnce  sync.Once
	consErr   error
	bg        sync.WaitGroup // the goroutine giveUp starts
	bgMu      sync.Mutex
	bgStopped bool // Close is waiting for bg: giveUp starts nothing more

	closeOnce sync.Once
	closeErr  error
}

// shareInputKey marks, in a stream's generic resources, that the stream
// has a kshare_share input: a kshare_txn output of a stream without one
// writes messages that carry no acknowledgement by design.
type shareInputKey struct{}

func newShareInput(conf *service.ParsedConfig, mgr *service.Resources) (*shareInput, error) {
	cfg, err := parseInputConfig(conf)
	if err != nil {
		return nil, err
	}
	in := &shareInput{cfg: cfg, log: mgr.Logger(), res: mgr, metrics: newInputMetrics(mgr)}
	if !cfg.batching.IsNoop() {
		if in.batcher, err = cfg.batching.NewBatcher(mgr); err != nil {
			return nil, fmt.Errorf("%s: %w", fBatching, err)
		}
	}
	mgr.SetGeneric(shareInputKey{}, true)
	created(in)
	return in, nil
}

// Connect creates the consumer, which joins the group in the background,
// and the acknowledger, whose InitTransactions checks that the cluster
// serves transactional share acknowledgements (KIP-1289).
func (in *shareInput) Connect(ctx context.Context) error {
	if in.cons != nil {
		return nil
	}
	c := in.cfg
	logger := slogFor(in.log)
	copts := []shareconsumer.Opt{
		shareconsumer.SeedBrokers(c.client.seeds...),
		shareconsumer.Group(c.group),
		shareconsumer.Topics(c.topics...),
		shareconsumer.Mode(shareconsumer.Transactional),
		// A message may spend longer than the lock in processors; the
		// ledger and the input's Close give back what no component
		// claims, so held records are never held without an owner.
		shareconsumer.RenewHeldLocks(true),
		shareconsumer.MaxPollRecords(c.maxPoll),
		shareconsumer.MaxWait(c.maxWait),
		shareconsumer.KgoOpts(c.client.kgoOpts()...),
		shareconsumer.Logger(logger),
		shareconsumer.ShareLedger(c.ledgerTopic),
	}
	if c.groupConfig != (shareconsumer.GroupConfig{}) {
		copts = append(copts, shareconsumer.SetGroupConfig(c.groupConfig))
	}
	aopts := []acknowledger.Opt{
		acknowledger.SeedBrokers(c.client.seeds...),
		acknowledger.TransactionalID(c.txnID),
		acknowledger.TransactionTimeout(c.txnTimeout),
		acknowledger.KgoOpts(c.client.kgoOpts()...),
		acknowledger.Logger(logger),
		acknowledger.ShareLedger(c.ledgerTopic),
	}
	if c.client.tls != nil {
		copts = append(copts, shareconsumer.DialTLSConfig(c.client.tls))
		aopts = append(aopts, acknowledger.DialTLSConfig(c.client.tls))
	}
	if len(c.client.sasl) > 0 {
		copts = append(copts, shareconsumer.SASL(c.client.sasl...))
		aopts = append(aopts, acknowledger.SASL(c.client.sasl...))
	}
	ack, err := acknowledger.New(aopts...)
	if err != nil {
		return fmt.Errorf("kshare_share: acknowledger: %w", err)
	}
	initCtx, cancel := context.WithTimeout(ctx, c.txnTimeout)
	defer cancel()
	if err := ack.InitTransactions(initCtx); err != nil {
		closeQuietly(ack.Close)
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer from the cluster (%s: %v) within %v: %w", fSeedBrokers, c.client.seeds, c.txnTimeout, err)
		}
		return fmt.Errorf("kshare_share: acknowledger %s: init transactions: %w", c.txnID, explain(err))
	}
	cons, err := shareconsumer.New(copts...)
	if err != nil {
		closeQuietly(ack.Close)
		return fmt.Errorf("kshare_share: consumer: %w", err)
	}
	in.cons, in.ack, in.ledger = cons, ack, newLedger(cons)
	in.ledger.stuck = func(cause error) {
		in.giveUp(fmt.Errorf("every kshare_txn output that writes its messages has stopped, the last one because its %w", cause))
	}
	in.acker = newAcker(cons, ack, in.ledger, c.txnTimeout, in.log, in.metrics)
	in.acker.stuck = func(cause error) {
		in.giveUp(fmt.Errorf("its acknowledger %s %s: %w", c.txnID, fatalWhy(cause), cause))
	}
	in.log.Infof("kshare_share: group %s, topics %v, acknowledger %s", c.group, c.topics, c.txnID)
	return nil
}

// explain adds what to do to the errors a misconfigured pipeline meets
// first.
func explain(err error) error {
	switch {
	case errors.Is(err, kshare.ErrUnsupported):
		return fmt.Errorf("the cluster does not serve transactional share acknowledgements (KIP-1289); for exactly-once on it, give the input and its outputs the same %s: %w", fLedgerTopic, err)
	case errors.Is(err, kshare.ErrFatal):
		return fmt.Errorf("%w (fenced by a newer instance with the same transactional_id, not authorized, or a transaction_timeout above the broker's maximum)", err)
	}
	return err
}

// closeTimeout bounds what Close waits for: the end of a transaction left
// open, the final acknowledgements, leaving the group.
const closeTimeout = 10 * time.Second

// closeQuietly closes a client that never did anything.
func closeQuietly(close func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = close(ctx)
}

// ReadBatch returns the next batch: what one poll returned, or what the
// batching policy makes of the polled records.
func (in *shareInput) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	if in.cons == nil {
		return nil, nil, service.ErrNotConnected
	}
	if in.endCause() != nil {
		return nil, nil, service.ErrEndOfInput
	}
	if in.batcher == nil {
		if len(in.queued) == 0 {
			if err := in.poll(ctx); err != nil {
				return nil, nil, err
			}
		}
		hs := in.queued
		in.queued = nil
		return in.batch(hs)
	}
	for {
		for len(in.queued) > 0 {
			if in.endCause() != nil {
				return nil, nil, service.ErrEndOfInput
			}
			h := in.queued[0]
			in.queued = in.queued[1:]
			in.inBatch = append(in.inBatch, h)
			if in.batcher.Add(in.message(h)) {
				return in.flush(ctx)
			}
		}
		// With messages waiting and a period, poll until the period
		// ends, and then flush. (UntilNext never says 0: once the
		// period has passed, it says 1ns.)
		wait, timed := in.batcher.UntilNext()
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if len(in.inBatch) > 0 && timed {
			pctx, cancel = context.WithTimeout(ctx, wait)
		}
		err := in.poll(pctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil && pctx.Err() != nil {
				return in.flush(ctx) // the period ended
			}
			return nil, nil, err
		}
	}
}

// poll polls once and queues what came, each record with its handle.
func (in *shareInput) poll(ctx context.Context) error {
	records, err := in.cons.Poll(ctx)
	switch {
	case err == nil:
	case errors.Is(err, kshare.ErrClosed):
		// Closed by giveUp (or Close).
		return service.ErrEndOfInput
	case errors.Is(err, kshare.ErrFatal), errors.Is(err, kshare.ErrUnsupported):
		// Every Poll would return it from now on.
		in.giveUp(fmt.Errorf("its share consumer %s: %w", fatalWhy(err), err))
		return service.ErrEndOfInput
	default:
		return fmt.Errorf("kshare_share: poll: %w", err)
	}
	if in.endCause() != nil {
		// Ended while it polled: the consumer's Close gives these back.
		return service.ErrEndOfInput
	}
	for _, r := range records {
		n, _ := in.cons.DeliveryCount(r)
		in.queued = append(in.queued, in.ledger.deliver(r, n))
	}
	return nil
}

// flush returns the batcher's batch with the handles added since the last
// flush.
func (in *shareInput) flush(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	hs := in.inBatch
	in.inBatch = nil
	b, err := in.batcher.Flush(ctx)
	if err != nil {
		// The policy's processors failed: nothing of the batch goes
		// on, so its records go back to the group.
		in.acker.submit(ctx, decide(hs, nil, errAll, in.cfg.rejectAfter))
		return nil, nil, fmt.Errorf("kshare_share: batching: %w", err)
	}
	return in.track(b, hs)
}

// batch turns handles into a batch of messages.
func (in *shareInput) batch(hs []*pendingAck) (service.MessageBatch, service.AckFunc, error) {
	b := make(service.MessageBatch, len(hs))
	for i, h := range hs {
		b[i] = in.message(h)
	}
	return in.track(b, hs)
}

// track returns b with the AckFunc that resolves hs.
func (in *shareInput) track(b service.MessageBatch, hs []*pendingAck) (service.MessageBatch, service.AckFunc, error) {
	idx := b.Index()
	return b, func(ctx context.Context, err error) error {
		aerr := in.acker.submit(ctx, decide(hs, idx, err, in.cfg.rejectAfter))
		if aerr != nil && in.endCause() != nil {
			// The input has ended and said why, once; its consumer
			// gives the records back.
			return nil
		}
		return aerr
	}, nil
}

// message builds the message of a delivery: its value, its metadata, and
// its handle in the context.
func (in *shareInput) message(h *pendingAck) *service.Message {
	r := h.rec
	m := service.NewMessage(r.Value)
	m.MetaSetMut(metaKey, string(r.Key))
	m.MetaSetMut(metaTopic, r.Topic)
	m.MetaSetMut(metaPartition, int64(r.Partition))
	m.MetaSetMut(metaOffset, r.Offset)
	m.MetaSetMut(metaTimestampMs, r.Timestamp.UnixMilli())
	m.MetaSetMut(metaTimestampUnix, r.Timestamp.Unix())
	m.MetaSetMut(metaTombstone, r.Value == nil)
	m.MetaSetMut(metaDeliveryCount, int64(h.delivery))
	for _, hd := range r.Headers {
		m.MetaSetMut(hd.Key, string(hd.Value))
	}
	return m.WithContext(withAck(m.Context(), h))
}

// errAll nacks every message of a batch.
var errAll = errors.New("every message failed")

// decide sorts the handles of an acknowledged batch into what the acker
// commits. With err nil every message was written or dropped: the handles
// still pending were dropped (no output claimed them) and are accepted.
// With an error, the messages it names (all of them unless it is a
// service.BatchError that names some) failed: their records are released,
// or rejected once delivered rejectAfter times; the others were dropped
// and are accepted.
func decide(hs []*pendingAck, idx *service.Indexer, err error, rejectAfter int) *ackReq {
	req := &ackReq{}
	var failed map[*pendingAck]bool
	if err != nil {
		failed = make(map[*pendingAck]bool)
		var berr *service.BatchError
		if idx != nil && errors.As(err, &berr) && berr.IndexedErrors() > 0 {
			// The walk visits every message the error covers, with
			// a nil error for those that did not fail.
			berr.WalkMessagesIndexedBy(idx, func(i int, m *service.Message, merr error) bool {
				if merr == nil {
					return true
				}
				if h := ackFrom(m.Context()); h != nil {
					failed[h] = true
				}
				if i >= 0 && i < len(hs) {
					failed[hs[i]] = true
				}
				return true
			})
		} else {
			for _, h := range hs {
				failed[h] = true
			}
		}
	}
	for _, h := range hs {
		switch {
		case !failed[h]:
			req.accept = append(req.accept, h)
		case rejectAfter > 0 && int(h.delivery) >= rejectAfter:
			req.reject = append(req.reject, h)
		default:
			req.release = append(req.release, h)
		}
	}
	req.cause = err
	return req
}

// giveUp ends the input, once: it can commit nothing more (cause says
// why: its acknowledger or consumer failed fatally, or every kshare_txn
// output that writes its messages has stopped). Taking more records from
// the group would only hold them from the instances that can commit them
// (the consumer renews the locks of what it holds), so it gives back at
// once what it holds: the ledger releases every pending handle (an output
// skips their messages) and the consumer closes, which releases the
// records no transaction staged (one ShareAcknowledge per leader), stops
// renewing and leaves the group; records staged in a transaction are the
// transaction's (a fenced producer's open transaction is aborted by the
// coordinator, and the producer resolves its staged acknowledgements as
// not committed). It says so once: a warning when a newer instance with
// the same transactional id fenced this one (the expected end of an
// instance that another one replaced), an error otherwise. ReadBatch
// then returns service.ErrEndOfInput, and the stream ends.
func (in *shareInput) giveUp(cause error) {
	in.endOnce.Do(func() {
		in.bgMu.Lock()
		defer in.bgMu.Unlock()
		if in.bgStopped {
			return // closed already: nothing to give back
		}
		in.ended.Store(&cause)
		msg := fmt.Sprintf("kshare_share: group %s: the input can commit nothing more, and ends; the records it holds go back to the group now: %v", in.cfg.group, cause)
		if isFenced(cause) {
			in.log.Warn(msg)
		} else {
			in.log.Error(msg)
		}
		in.ledger.close()
		in.bg.Add(1)
		go func() {
			defer in.bg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			defer cancel()
			if err := in.closeConsumer(ctx); err != nil {
				in.log.Warnf("kshare_share: closing the consumer after the end: %v", err)
			}
		}()
	})
}

// endCause returns why the input ended by itself, or nil.
func (in *shareInput) endCause() error {
	if p := in.ended.Load(); p != nil {
		return *p
	}
	return nil
}

// closeConsumer closes the consumer once; a second call waits for the
// first and returns its result.
func (in *shareInput) closeConsumer(ctx context.Context) error {
	in.consOnce.Do(func() { in.consErr = in.cons.Close(ctx) })
	return in.consErr
}

// isFenced reports whether err says that a newer producer with the same
// transactional id fenced the one that returned it.
func isFenced(err error) bool {
	var ke *kerr.Error
	return errors.As(err, &ke) && (ke.Code == kerr.ProducerFenced.Code || ke.Code == kerr.InvalidProducerEpoch.Code)
}

// fatalWhy says what a fatal error of a client means.
func fatalWhy(err error) string {
	switch {
	case isFenced(err):
		return "was fenced by a newer instance with the same transactional_id"
	case errors.Is(err, kshare.ErrUnsupported):
		return "needs what the cluster does not serve"
	}
	return "failed fatally"
}

// Close stops the acker (after the commits it was asked for), closes the
// acknowledger, releases the records nobody claimed and closes the
// consumer, which gives back the records it holds outside a transaction.
func (in *shareInput) Close(ctx context.Context) error {
	// Benthos gives no deadline; a cluster that is gone must not hold the
	// shutdown.
	ctx, cancel := context.WithTimeout(ctx, closeTimeout)
	defer cancel()
	in.closeOnce.Do(func() {
		if in.batcher != nil {
			_ = in.batcher.Close(ctx)
		}
		if in.cons == nil {
			return
		}
		in.acker.close()
		var errs []error
		// kshare.ErrCommitted: Close learned that an in-doubt
		// acknowledgement-only commit had committed. Not a failure.
		if err := in.ack.Close(ctx); err != nil && !errors.Is(err, kshare.ErrCommitted) {
			errs = append(errs, fmt.Errorf("acknowledger: %w", err))
		}
		in.ledger.close()
		in.bgMu.Lock()
		in.bgStopped = true
		in.bgMu.Unlock()
		in.bg.Wait()
		if err := in.closeConsumer(ctx); err != nil {
			errs = append(errs, fmt.Errorf("consumer: %w", err))
		}
		if len(errs) > 0 {
			in.closeErr = fmt.Errorf("kshare_share: close: %w", errors.Join(errs...))
		}
	})
	return in.closeErr
}
