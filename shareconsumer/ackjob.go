package shareconsumer

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/wire"
)

// AckError reports acknowledgements that the brokers did not apply, per
// partition (Explicit and Implicit modes). It matches kshare.ErrAbortable:
// the records of those partitions come back to the group, so treat them
// as not processed. Each cause is a *kerr.Error (INVALID_RECORD_STATE when
// a lock expired first, say), a transport error, or ErrLockExpired when
// the lock was lost before the acknowledgement could be sent; errors.Is
// and errors.As reach every cause.
type AckError struct {
	// Failed holds the cause of each partition's failure.
	Failed map[kshare.TopicPartition]error
}

// Error lists the failed partitions and their causes.
func (e *AckError) Error() string {
	tps := make([]kshare.TopicPartition, 0, len(e.Failed))
	for tp := range e.Failed {
		tps = append(tps, tp)
	}
	sortTopicPartitions(tps)
	var b strings.Builder
	fmt.Fprintf(&b, "kshare: share acknowledgements failed in %d partitions:", len(tps))
	for _, tp := range tps {
		fmt.Fprintf(&b, " %s/%d: %v;", tp.Topic, tp.Partition, e.Failed[tp])
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Unwrap returns kshare.ErrAbortable and every partition's cause.
func (e *AckError) Unwrap() []error {
	out := make([]error, 0, len(e.Failed)+1)
	out = append(out, kshare.ErrAbortable)
	for _, err := range e.Failed {
		out = append(out, err)
	}
	return out
}

// ackOp follows one Commit (or the final acknowledgements of Close)
// through every session it was split across.
type ackOp struct {
	mu        sync.Mutex
	remaining int
	failed    map[kshare.TopicPartition]error
	done      chan struct{}
	onDone    func(error)
}

func newAckOp(onDone func(error)) *ackOp {
	return &ackOp{done: make(chan struct{}), onDone: onDone}
}

// result is the op's outcome once done is closed.
func (o *ackOp) result() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.failed) == 0 {
		return nil
	}
	return &AckError{Failed: o.failed}
}

// finishJob records one job's outcome; the last one completes the op.
func (o *ackOp) finishJob(failed map[kshare.TopicPartition]error) {
	o.mu.Lock()
	for tp, err := range failed {
		if o.failed == nil {
			o.failed = make(map[kshare.TopicPartition]error)
		}
		o.failed[tp] = err
	}
	o.remaining--
	last := o.remaining == 0
	o.mu.Unlock()
	if last {
		o.complete()
	}
}

func (o *ackOp) complete() {
	close(o.done)
	if o.onDone != nil {
		o.onDone(o.result())
	}
}

// jobPart is one partition's acknowledgements in a job.
type jobPart struct {
	topicID [16]byte
	batches []wire.AcknowledgementBatch
}

// ackJob is a set of acknowledgements queued on one session. op, if set,
// learns the outcome.
type ackJob struct {
	parts map[kshare.TopicPartition]*jobPart
	op    *ackOp
	// quiet jobs release records after an aborted transaction: they
	// may find records the abort already made available, which is
	// expected, so their failures are not warned about. Their offsets
	// are checked again before sending, since a newer delivery of a
	// record to this consumer must not be released.
	quiet bool
	// failed collects per-partition errors until the job finishes.
	failed map[kshare.TopicPartition]error
}

func (j *ackJob) add(tp kshare.TopicPartition, id [16]byte, batches []wire.AcknowledgementBatch) {
	if len(batches) == 0 {
		return
	}
	if j.parts == nil {
		j.parts = make(map[kshare.TopicPartition]*jobPart)
	}
	p := j.parts[tp]
	if p == nil {
		p = &jobPart{topicID: id}
		j.parts[tp] = p
	}
	p.batches = append(p.batches, batches...)
}

func (j *ackJob) fail(tp kshare.TopicPartition, err error) {
	if _, ok := j.parts[tp]; !ok || err == nil {
		return
	}
	if j.failed == nil {
		j.failed = make(map[kshare.TopicPartition]error)
	}
	j.failed[tp] = err
}

// failAll fails every partition of the job with err and finishes it.
func (j *ackJob) failAll(err error) {
	for tp := range j.parts {
		j.fail(tp, err)
	}
	j.finish()
}

// finish reports the job's outcome to its op, if any.
func (j *ackJob) finish() {
	if j.op != nil {
		j.op.finishJob(j.failed)
	}
}

// jobSet builds one job per session for an op.
type jobSet struct {
	op    *ackOp
	quiet bool
	jobs  map[*session]*ackJob
}

func (s *jobSet) add(a *acquisition, batches []wire.AcknowledgementBatch) {
	if len(batches) == 0 {
		return
	}
	if s.jobs == nil {
		s.jobs = make(map[*session]*ackJob)
	}
	j := s.jobs[a.sess]
	if j == nil {
		j = &ackJob{op: s.op, quiet: s.quiet}
		s.jobs[a.sess] = j
	}
	j.add(a.tp, a.topicID, batches)
}

// errNoResponse is a partition that the broker left out of its answer.
var errNoResponse = errors.New("partition missing from the broker's response")

// sortTopicPartitions sorts tps by topic name, then partition.
func sortTopicPartitions(tps []kshare.TopicPartition) {
	slices.SortFunc(tps, func(a, b kshare.TopicPartition) int {
		if c := cmp.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return cmp.Compare(a.Partition, b.Partition)
	})
}
