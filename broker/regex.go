package broker

// Regular expressions that clients send: KIP-848 subscriptions
// (ConsumerGroupHeartbeat's SubscribedTopicRegex) and ListTransactions'
// TransactionalIdPattern. Go's regexp runs in time proportional to the
// input times the program, so one expression of under 1 MiB whose NFA keeps
// tens of thousands of threads alive costs seconds per topic name matched:
// a heartbeat once stopped the whole broker for 14 s that way.
//
// So expressions are bounded (maxRegexLen bytes before anything is parsed,
// maxRegexInsts program instructions once compiled), each is compiled once
// per request, and the matching that grows with the number of names is
// done on the loop only while it is small (regexSyncSteps: program size
// times the bytes of the names); past that it runs in the background, one
// resolution at a time, as Kafka resolves subscriptions off the request
// path, and the result is applied on the loop when it is ready.

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"sort"
)

const (
	// maxRegexLen bounds an expression's length, so that parsing and
	// compiling it on the loop stays cheap (about a millisecond).
	maxRegexLen = 16 << 10
	// maxRegexInsts bounds its compiled program: the factor by which
	// matching costs more than reading the name.
	maxRegexInsts = 20000
	// regexSyncSteps is the matching work (program instructions times
	// name bytes) the loop does itself; more goes to the background.
	regexSyncSteps = 1 << 20
	// regexJobSteps bounds the work of one background job, and
	// regexNameSteps of one match within it (a job gives up on Close only
	// between two matches). Topic names are short enough that a
	// subscription never reaches either; transactional ids may be 32 KiB
	// long, so a ListTransactions pattern past them is refused.
	regexJobSteps  = 1 << 28
	regexNameSteps = 1 << 24
)

// boundedRegex compiles expr, anchored to match whole strings, with the
// limits above. It returns the program's size, which prices a match.
func boundedRegex(expr string) (*regexp.Regexp, int, error) {
	if len(expr) > maxRegexLen {
		return nil, 0, fmt.Errorf("regular expression of %d bytes is longer than the broker's limit of %d", len(expr), maxRegexLen)
	}
	anchored := `^(?:` + expr + `)$`
	parsed, err := syntax.Parse(anchored, syntax.Perl)
	if err != nil {
		return nil, 0, fmt.Errorf("invalid regular expression %q: %w", expr, err)
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return nil, 0, fmt.Errorf("invalid regular expression %q: %w", expr, err)
	}
	if len(prog.Inst) > maxRegexInsts {
		return nil, 0, fmt.Errorf("regular expression compiles to %d instructions, more than the broker's limit of %d", len(prog.Inst), maxRegexInsts)
	}
	re, err := regexp.Compile(anchored)
	if err != nil {
		return nil, 0, fmt.Errorf("invalid regular expression %q: %w", expr, err)
	}
	return re, len(prog.Inst), nil
}

// regexCost is the matching work of insts-instruction program over names.
func regexCost(insts int, names []string) int64 {
	var n int64
	for _, name := range names {
		n += int64(len(name)) + 1
	}
	return n * int64(insts)
}

// matchNames returns the names re matches, sorted. stop ends it early
// (nil, false) when closed; it is checked before every name, since one
// match may take a good part of a second.
func matchNames(re *regexp.Regexp, names []string, stop <-chan struct{}) ([]string, bool) {
	var out []string
	for _, name := range names {
		if stop != nil {
			select {
			case <-stop:
				return nil, false
			default:
			}
		}
		if re.MatchString(name) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, true
}

// inBackground runs work off the loop, one piece of work at a time per
// slot (sem: regexSem or listTxnSem), and then apply on the loop with its
// result. The goroutine is the cluster's (c.wg) and gives up when the
// cluster closes.
func (c *Cluster) inBackground(sem chan struct{}, work func(stop <-chan struct{}) (any, bool), apply func(any)) {
	c.stats.regexBackground++
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		select {
		case sem <- struct{}{}:
		case <-c.dying:
			return
		}
		res, ok := work(c.dying)
		<-sem
		if !ok {
			return
		}
		select {
		case c.adminCh <- func() { apply(res) }:
		case <-c.dying:
		}
	}()
}
