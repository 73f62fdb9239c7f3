package broker

// ListTransactions (key 66).
//
// Versions: 0-2. v1 filters by duration, v2 by a transactional-id pattern.
//
// Behaviour:
//   - The transactions of the __transaction_state partitions this node leads
//     (each checked as every coordinator answer is: a partition the node no
//     longer leads is not listed), listed by transactional id.
//   - Filtered as Kafka filters them: by state name (a name Kafka does not
//     know comes back in UnknownStateFilters and matches nothing), by
//     producer id, from v1 by duration (only transactions whose start is
//     more than DurationFilterMillis ago; -1 for no filter) and from v2 by a
//     transactional-id pattern (RE2 syntax, whole id; a pattern that does
//     not compile, or is past the broker's bounds of 16 KiB and 20,000
//     program instructions (regex.go), is INVALID_REGULAR_EXPRESSION; so is
//     one whose matching would cost more than 2^24 steps (instructions
//     times id bytes) for one id or 2^28 for the request).
//
// Cost:
//   - The other filters run on the loop, O(1) per transaction of the node.
//     A pattern is compiled and matched in the background (one pattern at
//     a time over the cluster, in a slot of its own so that it cannot
//     hold up consumer groups' regex subscriptions), since matching costs
//     the pattern's program size times the ids' lengths; the work is
//     bounded as above, Close stops it between two ids, and the answer is
//     sent from there.
//
// Skipped:
//   - authorization.

import (
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { registerAPI(apiSpec{key: 66, min: 0, max: 2, handle: handleListTransactions}) }

func handleListTransactions(c *Cluster, r *request) (kmsg.Response, error) {
	req := r.kreq.(*kmsg.ListTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.ListTransactionsResponse)
	states := make(map[txnState]bool)
	for _, name := range req.StateFilters {
		s, holdable, known := parseTxnState(name)
		if !known {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, name)
		}
		if holdable {
			states[s] = true
		}
	}
	pids := make(map[int64]bool, len(req.ProducerIDFilters))
	for _, pid := range req.ProducerIDFilters {
		pids[pid] = true
	}
	pattern := ""
	if req.Version >= 2 && req.TransactionalIDPattern != nil {
		pattern = *req.TransactionalIDPattern
	}
	duration := int64(-1)
	if req.Version >= 1 {
		duration = req.DurationFilterMillis
	}
	nowMs := time.Now().UnixMilli()
	tc := c.coordinators.txn
	for key := range tc.shards.loaded {
		if key.node != r.node.id {
			continue
		}
		sh, err := tc.shards.lookup(key.node, key.partition)
		if err != nil {
			continue
		}
		for _, m := range sh.state.txns {
			switch {
			case len(req.StateFilters) > 0 && !states[m.state]:
			case len(pids) > 0 && !pids[m.producerID]:
			case duration >= 0 && nowMs-m.startMs <= duration:
			default:
				st := kmsg.NewListTransactionsResponseTransactionState()
				st.TransactionalID = m.id
				st.ProducerID = m.producerID
				st.TransactionState = m.state.String()
				resp.TransactionStates = append(resp.TransactionStates, st)
			}
		}
	}
	if pattern == "" {
		sortTransactionStates(resp.TransactionStates)
		return resp, nil
	}
	// The pattern is compiled and matched off the loop: its cost grows
	// with the pattern and with every transactional id's length.
	c.inBackground(c.listTxnSem, func(stop <-chan struct{}) (any, bool) {
		re, insts, err := boundedRegex(pattern)
		if err == nil {
			err = checkPatternCost(insts, resp.TransactionStates)
		}
		if err != nil {
			c.logger.Debug("ListTransactions pattern refused", "err", err)
			resp.ErrorCode = kerr.InvalidRegularExpression.Code
			resp.TransactionStates = nil
			return resp, true
		}
		kept := resp.TransactionStates[:0]
		for _, st := range resp.TransactionStates {
			select {
			case <-stop:
				return nil, false
			default:
			}
			if re.MatchString(st.TransactionalID) {
				kept = append(kept, st)
			}
		}
		resp.TransactionStates = kept
		sortTransactionStates(resp.TransactionStates)
		return resp, true
	}, func(res any) { r.respond(res.(*kmsg.ListTransactionsResponse)) })
	return nil, nil
}

// checkPatternCost refuses a pattern of insts program instructions whose
// matching against the listed ids would pass the bounds of one background
// job or of one match (regex.go).
func checkPatternCost(insts int, states []kmsg.ListTransactionsResponseTransactionState) error {
	var total, longest int64
	for _, st := range states {
		n := int64(len(st.TransactionalID)) + 1
		total += n
		longest = max(longest, n)
	}
	switch {
	case longest*int64(insts) > regexNameSteps:
		return fmt.Errorf("a pattern of %d instructions against a transactional id of %d bytes passes the broker's bound of %d steps per match", insts, longest-1, regexNameSteps)
	case total*int64(insts) > regexJobSteps:
		return fmt.Errorf("a pattern of %d instructions against %d transactional ids (%d bytes) passes the broker's bound of %d steps per request", insts, len(states), total, regexJobSteps)
	}
	return nil
}

func sortTransactionStates(states []kmsg.ListTransactionsResponseTransactionState) {
	sort.Slice(states, func(i, j int) bool { return states[i].TransactionalID < states[j].TransactionalID })
}
