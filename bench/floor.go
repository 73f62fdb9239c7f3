package main

// The floor of an exactly-once share commit: the round trips such a commit
// needs, done bare by one client with nothing else running, one after
// another, with requests built by hand: a Produce of the transaction's
// records (TV2: the leader adds the partition to the transaction),
// TxnShareAcknowledge v0 of the records the member acquired (the leader
// adds the share state partition to the transaction), and EndTxn(COMMIT), which returns after the markers
// are written. The records to acknowledge are acquired (ShareFetch) before the
// clock starts, as a pipeline acquires them before it commits.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

// floorSpec is one floor measurement.
type floorSpec struct {
	commits   int
	txnSize   int
	valueSize int
}

// floorClient holds what the bare round trips need.
type floorClient struct {
	cl                   *kgo.Client
	group, member, txnID string
	memberEpoch          int32
	sessionEpoch         int32
	in, out              string
	inID, outID          [16]byte
	inLeader, outLeader  int32
	txnCoord             int32
	pid                  int64
	epoch                int16
	value                []byte
	lastHeartbeat        time.Time
}

// measureFloor runs spec.commits bare commits and returns their latencies.
func measureFloor(ctx context.Context, e *env, spec floorSpec) (sample, error) {
	f := &floorClient{
		group: e.name("floor"),
		txnID: e.name("floor-txn"),
		in:    e.name("floor-in"),
		out:   e.name("floor-out"),
		value: make([]byte, spec.valueSize),
	}
	for _, t := range []string{f.in, f.out} {
		if err := e.createTopic(ctx, t, 1); err != nil {
			return sample{}, err
		}
	}
	defer e.deleteTopics(context.Background(), f.in, f.out)
	if err := e.fillInput(ctx, f.in, 1, spec.commits*spec.txnSize, spec.valueSize, spec.txnSize); err != nil {
		return sample{}, err
	}
	if err := e.shareGroupFromStart(ctx, f.group); err != nil {
		return sample{}, err
	}
	// kgo sends only the keys its MaxVersions list, so the KIP-1289 ones
	// must be added to its stable list.
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds()...), kgo.MaxVersions(wire.KgoMaxVersions()))
	if err != nil {
		return sample{}, err
	}
	defer cl.Close()
	f.cl = cl
	if err := f.setUp(ctx); err != nil {
		return sample{}, fmt.Errorf("floor set-up: %w", err)
	}
	defer f.leave(context.Background())

	lat := make([]time.Duration, 0, spec.commits)
	for i := range spec.commits {
		ranges, err := f.acquire(ctx, spec.txnSize)
		if err != nil {
			return sample{}, fmt.Errorf("floor commit %d: %w", i, err)
		}
		t0 := time.Now()
		if err := f.commit(ctx, spec.txnSize, ranges); err != nil {
			return sample{}, fmt.Errorf("floor commit %d: %w", i, err)
		}
		lat = append(lat, time.Since(t0))
	}
	return sample{P50: ms(percentile(lat, 50)), P99: ms(percentile(lat, 99)), Commits: len(lat)}, nil
}

func (f *floorClient) setUp(ctx context.Context) error {
	md := kmsg.NewPtrMetadataRequest()
	for _, t := range []string{f.in, f.out} {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		md.Topics = append(md.Topics, rt)
	}
	mresp, err := md.RequestWith(ctx, f.cl)
	if err != nil {
		return err
	}
	for _, t := range mresp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil || len(t.Partitions) != 1 {
			return fmt.Errorf("metadata of %v: %v", t.Topic, err)
		}
		switch *t.Topic {
		case f.in:
			f.inID, f.inLeader = t.TopicID, t.Partitions[0].Leader
		case f.out:
			f.outID, f.outLeader = t.TopicID, t.Partitions[0].Leader
		}
	}
	coord, err := f.coordinator(ctx, 1, f.txnID)
	if err != nil {
		return err
	}
	f.txnCoord = coord
	ipid := kmsg.NewPtrInitProducerIDRequest()
	ipid.TransactionalID = kmsg.StringPtr(f.txnID)
	ipid.TransactionTimeoutMillis = 60_000
	ipid.ProducerID, ipid.ProducerEpoch = -1, -1
	kresp, err := f.cl.Broker(int(coord)).Request(ctx, ipid)
	if err != nil {
		return err
	}
	iresp := kresp.(*kmsg.InitProducerIDResponse)
	if err := kerr.ErrorForCode(iresp.ErrorCode); err != nil {
		return fmt.Errorf("InitProducerId: %w", err)
	}
	f.pid, f.epoch = iresp.ProducerID, iresp.ProducerEpoch

	id := make([]byte, 16)
	rand.Read(id)
	f.member = hex.EncodeToString(id)
	if err := f.heartbeat(ctx, 0); err != nil {
		return err
	}
	return nil
}

func (f *floorClient) coordinator(ctx context.Context, typ int8, key string) (int32, error) {
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorType, req.CoordinatorKeys = typ, []string{key}
	resp, err := req.RequestWith(ctx, f.cl)
	if err != nil {
		return 0, err
	}
	if len(resp.Coordinators) != 1 {
		return 0, fmt.Errorf("FindCoordinator %s: %d answers", key, len(resp.Coordinators))
	}
	c := resp.Coordinators[0]
	if err := kerr.ErrorForCode(c.ErrorCode); err != nil {
		return 0, fmt.Errorf("FindCoordinator %s: %w", key, err)
	}
	return c.NodeID, nil
}

// heartbeat joins (epoch 0), keeps (the member's epoch) or leaves (-1).
func (f *floorClient) heartbeat(ctx context.Context, epoch int32) error {
	coord, err := f.coordinator(ctx, 0, f.group)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID, req.MemberID, req.MemberEpoch = f.group, f.member, epoch
	if epoch == 0 {
		req.SubscribedTopicNames = []string{f.in}
	}
	kresp, err := f.cl.Broker(int(coord)).Request(ctx, req)
	if err != nil {
		return err
	}
	resp := kresp.(*kmsg.ShareGroupHeartbeatResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return fmt.Errorf("ShareGroupHeartbeat: %w", err)
	}
	f.memberEpoch, f.lastHeartbeat = resp.MemberEpoch, time.Now()
	return nil
}

// acquire fetches up to n records of the input for the member.
func (f *floorClient) acquire(ctx context.Context, n int) ([]wire.AcknowledgementBatch, error) {
	if time.Since(f.lastHeartbeat) > 2*time.Second {
		if err := f.heartbeat(ctx, f.memberEpoch); err != nil {
			return nil, err
		}
	}
	for attempt := 0; attempt < 50; attempt++ {
		req := kmsg.NewPtrShareFetchRequest()
		req.GroupID, req.MemberID = kmsg.StringPtr(f.group), kmsg.StringPtr(f.member)
		req.ShareSessionEpoch = f.sessionEpoch
		req.MaxWaitMillis, req.MaxBytes, req.MaxRecords, req.BatchSize = 500, 50<<20, int32(n), int32(n)
		if f.sessionEpoch == 0 {
			rt := kmsg.NewShareFetchRequestTopic()
			rt.TopicID = f.inID
			rp := kmsg.NewShareFetchRequestTopicPartition()
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
		}
		kresp, err := f.cl.Broker(int(f.inLeader)).Request(ctx, req)
		if err != nil {
			return nil, err
		}
		resp := kresp.(*kmsg.ShareFetchResponse)
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return nil, fmt.Errorf("ShareFetch: %w", err)
		}
		f.sessionEpoch++
		var out []wire.AcknowledgementBatch
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return nil, fmt.Errorf("ShareFetch partition: %w", err)
				}
				for _, ar := range p.AcquiredRecords {
					out = append(out, wire.AcknowledgementBatch{FirstOffset: ar.FirstOffset, LastOffset: ar.LastOffset, AcknowledgeType: wire.AckAccept})
				}
			}
		}
		if len(out) > 0 {
			return out, nil
		}
	}
	return nil, fmt.Errorf("ShareFetch acquired nothing in 50 attempts")
}

// commit is the measured part: produce, TxnShareAcknowledge, EndTxn.
func (f *floorClient) commit(ctx context.Context, n int, ranges []wire.AcknowledgementBatch) error {
	prod := kmsg.NewPtrProduceRequest()
	prod.TransactionID = kmsg.StringPtr(f.txnID)
	prod.Acks, prod.TimeoutMillis = -1, 30_000
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic, pt.TopicID = f.out, f.outID // names below v13, ids from v13
	pp := kmsg.NewProduceRequestTopicPartition()
	pp.Records = txnBatch(f.pid, f.epoch, n, f.value)
	pt.Partitions = append(pt.Partitions, pp)
	prod.Topics = append(prod.Topics, pt)
	kresp, err := f.cl.Broker(int(f.outLeader)).Request(ctx, prod)
	if err != nil {
		return err
	}
	for _, t := range kresp.(*kmsg.ProduceResponse).Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("Produce: %w", err)
			}
		}
	}

	stage := &wire.TxnShareAcknowledgeRequest{
		TransactionalID: f.txnID, GroupID: f.group, MemberID: f.member, MemberEpoch: f.memberEpoch,
		ProducerID: f.pid, ProducerEpoch: f.epoch,
		Topics: []wire.TxnShareAcknowledgeTopic{{TopicID: f.inID, Partitions: []wire.TxnShareAcknowledgePartition{{Partition: 0, AcknowledgementBatches: txnBatches(ranges)}}}},
	}
	kresp, err = f.cl.Broker(int(f.inLeader)).Request(ctx, stage)
	if err != nil {
		return err
	}
	sresp := kresp.(*wire.TxnShareAcknowledgeResponse)
	if err := kerr.ErrorForCode(sresp.ErrorCode); err != nil {
		return fmt.Errorf("TxnShareAcknowledge: %w", err)
	}
	for _, t := range sresp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("TxnShareAcknowledge: %w", err)
			}
		}
	}

	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = f.txnID, f.pid, f.epoch, true
	kresp, err = f.cl.Broker(int(f.txnCoord)).Request(ctx, end)
	if err != nil {
		return err
	}
	eresp := kresp.(*kmsg.EndTxnResponse)
	if err := kerr.ErrorForCode(eresp.ErrorCode); err != nil {
		return fmt.Errorf("EndTxn: %w", err)
	}
	if eresp.Version >= 5 {
		f.pid, f.epoch = eresp.ProducerID, eresp.ProducerEpoch // TV2 bumps the epoch
	}
	return nil
}

// leave closes the share session and leaves the group.
func (f *floorClient) leave(ctx context.Context) {
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID, req.MemberID = kmsg.StringPtr(f.group), kmsg.StringPtr(f.member)
	req.ShareSessionEpoch = -1
	f.cl.Broker(int(f.inLeader)).Request(ctx, req)
	f.heartbeat(ctx, -1)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// txnBatch encodes one uncompressed transactional record batch of n
// records with value, sequence 0 (each TV2 transaction has a new epoch).
func txnBatch(pid int64, epoch int16, n int, value []byte) []byte {
	now := time.Now().UnixMilli()
	var recs []byte
	for i := range n {
		var body []byte
		body = append(body, 0)                   // attributes
		body = kbin.AppendVarlong(body, 0)       // timestamp delta
		body = kbin.AppendVarint(body, int32(i)) // offset delta
		body = kbin.AppendVarint(body, -1)       // no key
		body = kbin.AppendVarint(body, int32(len(value)))
		body = append(body, value...)
		body = kbin.AppendVarint(body, 0) // headers
		recs = kbin.AppendVarint(recs, int32(len(body)))
		recs = append(recs, body...)
	}
	b := kmsg.RecordBatch{
		FirstOffset:          0,
		PartitionLeaderEpoch: -1,
		Magic:                2,
		Attributes:           0x10, // transactional
		LastOffsetDelta:      int32(n - 1),
		FirstTimestamp:       now,
		MaxTimestamp:         now,
		ProducerID:           pid,
		ProducerEpoch:        epoch,
		FirstSequence:        0,
		NumRecords:           int32(n),
		Records:              recs,
	}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], castagnoli))
	return raw
}

// txnBatches turns single-type ranges into TxnShareAcknowledge batches.
func txnBatches(ranges []wire.AcknowledgementBatch) []wire.TxnShareAcknowledgeBatch {
	out := make([]wire.TxnShareAcknowledgeBatch, len(ranges))
	for i, r := range ranges {
		out[i] = wire.TxnShareAcknowledgeBatch{FirstOffset: r.FirstOffset, LastOffset: r.LastOffset, AcknowledgeTypes: []wire.AckType{r.AcknowledgeType}}
	}
	return out
}
