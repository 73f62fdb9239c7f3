package txn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/internal/kgoclient"
	"github.com/kshare-go/kshare/internal/retry"
	"github.com/kshare-go/kshare/wire"
)

// CoordinatorType is a FindCoordinator key type.
type CoordinatorType int8

// The coordinator key types of FindCoordinator.
const (
	GroupCoordinator       CoordinatorType = 0
	TransactionCoordinator CoordinatorType = 1
	ShareCoordinator       CoordinatorType = 2
)

// String names the key type ("group", "transaction", "share").
func (t CoordinatorType) String() string {
	switch t {
	case GroupCoordinator:
		return "group"
	case TransactionCoordinator:
		return "transaction"
	case ShareCoordinator:
		return "share"
	}
	return fmt.Sprintf("CoordinatorType(%d)", int8(t))
}

type coordKey struct {
	typ CoordinatorType
	key string
}

// Coordinators finds coordinators with FindCoordinator and caches them. It
// is safe for concurrent use. A cached coordinator is dropped with Forget
// when it answers NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE or its
// connection fails; Refresh asks the cluster again regardless of the cache
// (the stale-answer defense relies on it).
type Coordinators struct {
	cl     *kgo.Client
	logger *slog.Logger

	mu    sync.Mutex
	cache map[coordKey]int32
}

// NewCoordinators returns an empty coordinator cache that sends its
// FindCoordinator requests through cl.
func NewCoordinators(cl *kgo.Client, logger *slog.Logger) *Coordinators {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Coordinators{cl: cl, logger: logger, cache: make(map[coordKey]int32)}
}

// Find returns the coordinator node for key, from the cache or with one
// FindCoordinator round trip. It does not retry: a retriable error (for
// example COORDINATOR_NOT_AVAILABLE while the coordinator loads) comes back
// as a *kerr.Error for the caller's retry loop.
func (c *Coordinators) Find(ctx context.Context, typ CoordinatorType, key string) (int32, error) {
	c.mu.Lock()
	node, ok := c.cache[coordKey{typ, key}]
	c.mu.Unlock()
	if ok {
		return node, nil
	}
	return c.Refresh(ctx, typ, key)
}

// Refresh asks the cluster for the coordinator of key, ignoring the cache,
// and caches the answer.
func (c *Coordinators) Refresh(ctx context.Context, typ CoordinatorType, key string) (int32, error) {
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorType = int8(typ)
	req.CoordinatorKey = key
	req.CoordinatorKeys = []string{key}
	kresp, err := c.cl.Request(ctx, req)
	if err != nil {
		return -1, fmt.Errorf("find %s coordinator for %q: %w", typ, key, err)
	}
	resp := kresp.(*kmsg.FindCoordinatorResponse)
	node, code, msg := resp.NodeID, resp.ErrorCode, resp.ErrorMessage
	for _, co := range resp.Coordinators {
		if co.Key == key {
			node, code, msg = co.NodeID, co.ErrorCode, co.ErrorMessage
		}
	}
	if err := kerr.ErrorForCode(code); err != nil {
		return -1, fmt.Errorf("find %s coordinator for %q: %w%s", typ, key, err, kgoclient.Detail(msg))
	}
	if node < 0 {
		return -1, fmt.Errorf("find %s coordinator for %q: %w (no node)", typ, key, kerr.CoordinatorNotAvailable)
	}
	c.mu.Lock()
	old, had := c.cache[coordKey{typ, key}]
	c.cache[coordKey{typ, key}] = node
	c.mu.Unlock()
	if had && old != node {
		c.logger.Debug("coordinator moved", "type", typ.String(), "key", key, "from", old, "to", node)
	}
	return node, nil
}

// Forget drops the cached coordinator of key if it is still node.
func (c *Coordinators) Forget(typ CoordinatorType, key string, node int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.cache[coordKey{typ, key}]; ok && cur == node {
		delete(c.cache, coordKey{typ, key})
	}
}

// Cached returns the cached coordinator of key, if any.
func (c *Coordinators) Cached(typ CoordinatorType, key string) (int32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	node, ok := c.cache[coordKey{typ, key}]
	return node, ok
}

// staleSuspect reports whether code is an answer that a coordinator which
// has just lost its partition may give from a stale cache (KAFKA-21181):
// such answers are final only once the current coordinator confirms them.
func staleSuspect(code int16) bool {
	switch code {
	case kerr.InvalidTxnState.Code, kerr.ProducerFenced.Code, kerr.InvalidProducerIDMapping.Code:
		return true
	}
	return false
}

// coordinatorCall is one request to the coordinator of (typ, key) that
// callCoordinator retries.
type coordinatorCall struct {
	op   string
	typ  CoordinatorType
	key  string
	sent func() // called before each attempt is handed to the transport
	// lost is called when an attempt was handed to the transport and no
	// answer came back (a broken connection, ctx ending): the request
	// may or may not have been applied.
	lost func()
	// build returns the request; it is called for every attempt.
	build func() kmsg.Request
	// code extracts the error code that decides the outcome.
	code func(kmsg.Response) (int16, *string)
}

// callCoordinator sends call to the current coordinator until it gets a
// final answer or ctx ends. NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and
// connection errors (an answer lost, or a request never delivered) drop
// the cached coordinator and retry after finding it again;
// COORDINATOR_LOAD_IN_PROGRESS and CONCURRENT_TRANSACTIONS retry the same
// coordinator. A stale-suspect answer (INVALID_TXN_STATE, PRODUCER_FENCED,
// INVALID_PRODUCER_ID_MAPPING) is never final at once: the coordinator is
// found again with FindCoordinator and the request retried there, whether
// or not it moved, since a node that answered from a stale cache may have
// become the coordinator again meanwhile (leadership can go A to B to A
// inside the stale window). A true answer repeats; only the same answer
// from the coordinator that FindCoordinator named, still named afterwards,
// is final. The returned error is unclassified (a *kerr.Error or a
// transport error).
func (c *Coordinators) callCoordinator(ctx context.Context, call coordinatorCall) (kmsg.Response, error) {
	var chk staleCheck
	return retry.Do(ctx, func(ctx context.Context) (kmsg.Response, error) {
		node, err := c.Find(ctx, call.typ, call.key)
		if err != nil {
			return nil, retriableOrPermanent(err)
		}
		req := call.build()
		if call.sent != nil {
			call.sent()
		}
		resp, err := c.cl.Broker(int(node)).Request(ctx, req)
		if errors.Is(err, wire.ErrMalformed) {
			// Answered, in a form kshare does not speak: not lost, and
			// no retry can help.
			return nil, permanent(fmt.Errorf("%s at node %d: %w", call.op, node, err))
		}
		if err != nil {
			if call.lost != nil {
				call.lost()
			}
			if isContextErr(err) || errors.Is(err, kgo.ErrClientClosed) {
				return nil, permanent(err)
			}
			c.Forget(call.typ, call.key, node)
			chk.reset()
			return nil, fmt.Errorf("%s at node %d: %w", call.op, node, err)
		}
		code, msg := call.code(resp)
		if code == 0 {
			return resp, nil
		}
		kerrErr := kerr.ErrorForCode(code)
		wrapped := fmt.Errorf("%s at node %d: %w%s", call.op, node, kerrErr, kgoclient.Detail(msg))
		if !staleSuspect(code) {
			chk.reset()
		}
		switch {
		case code == kerr.NotCoordinator.Code || code == kerr.CoordinatorNotAvailable.Code:
			c.Forget(call.typ, call.key, node)
			return nil, wrapped
		case code == kerr.CoordinatorLoadInProgress.Code || code == kerr.ConcurrentTransactions.Code:
			return nil, wrapped
		case staleSuspect(code):
			current, err := c.Refresh(ctx, call.typ, call.key)
			if err != nil {
				// Cannot confirm yet: retry, the answer is not final.
				chk.reset()
				return nil, fmt.Errorf("%w; confirming with FindCoordinator: %w", wrapped, err)
			}
			if chk.confirmed(code, node, current) {
				return nil, permanent(wrapped)
			}
			c.logger.Info("answer may come from a former coordinator; retrying at the current one",
				"op", call.op, "answer", kerrErr.Error(), "answered_by", node, "current", current)
			return nil, wrapped
		case kerr.IsRetriable(kerrErr):
			return nil, wrapped
		}
		return nil, permanent(wrapped)
	})
}

// staleCheck is the stale-answer defense of one callCoordinator call: it
// remembers the last stale-suspect answer and the coordinator that
// FindCoordinator named right after it.
type staleCheck struct {
	seen  bool
	code  int16
	coord int32
}

// confirmed records a stale-suspect answer code that node gave, current
// being the coordinator FindCoordinator names now, and reports whether the
// answer is final: the previous attempt got the same answer, this attempt
// went to the coordinator named after it, and that node is still named.
func (s *staleCheck) confirmed(code int16, node, current int32) bool {
	final := s.seen && s.code == code && s.coord == node && current == node
	s.seen, s.code, s.coord = true, code, current
	return final
}

// reset forgets the previous answer: an answer of another kind came in
// between, so the next suspect answer needs its own confirmation.
func (s *staleCheck) reset() { s.seen = false }

// retriableOrPermanent passes retriable errors (and transport errors) on
// for another attempt and stops on non-retriable broker errors, such as an
// authorization failure from FindCoordinator.
func retriableOrPermanent(err error) error {
	var ke *kerr.Error
	if errors.As(err, &ke) && !ke.Retriable {
		return permanent(err)
	}
	if isContextErr(err) || errors.Is(err, kgo.ErrClientClosed) {
		return permanent(err)
	}
	return err
}
