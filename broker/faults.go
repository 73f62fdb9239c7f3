package broker

// Fault injection for tests of client lifecycles: a hook sees every request
// a client sends, on that connection's own goroutine, and may drop the
// connection before the node handles the request (the request never took
// effect) or after it (it took effect and its answer is lost), or run code
// at either point, such as cancelling the client's context, closing the
// client, or fencing it with a newer one. It is a test facility: no option
// or flag of the cluster turns it on, only InjectFaults.

import (
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Fault is what happens to one request on its way through a node.
type Fault int8

const (
	// Deliver handles and answers the request normally.
	Deliver Fault = iota
	// DropRequest closes the connection instead of handling the request:
	// the node never sees it and the client gets a connection error.
	DropRequest
	// DropAnswer has the node handle the request and then closes the
	// connection instead of writing the answer: the request took effect
	// and the client gets a connection error.
	DropAnswer
)

// String names the fault ("deliver", "drop request", "drop answer").
func (f Fault) String() string {
	switch f {
	case Deliver:
		return "deliver"
	case DropRequest:
		return "drop request"
	case DropAnswer:
		return "drop answer"
	}
	return "Fault(?)"
}

// FaultAction is a FaultHook's decision for one request.
type FaultAction struct {
	// Fault drops the connection before or after the request is handled.
	Fault Fault
	// AfterHandling, if set, runs once the node has handled the request
	// and before its answer is written (or dropped), on the connection's
	// goroutine, with the answer (nil if the handler gave none).
	AfterHandling func(resp kmsg.Response)
}

// FaultHook decides what happens to one request that a client (named by
// the client id of its request header) sent to node. It runs on that
// connection's goroutine before the request reaches the cluster's loop, so
// it may block and may call Cluster methods or drive other clients: only
// this connection waits, which Kafka's one-request-at-a-time connections
// make invisible to other clients. Requests nodes send each other do not
// pass through it. It must return eventually, or Close waits for it.
type FaultHook func(node int32, clientID string, req kmsg.Request) FaultAction

// faultHooks is the cluster's installed hook; its zero value has none.
type faultHooks struct {
	hook atomic.Pointer[FaultHook]
}

// InjectFaults installs hook for every request clients send from now on,
// replacing a hook installed earlier. The returned function removes it (if
// it is still the installed one); requests already past the hook are not
// affected.
func (c *Cluster) InjectFaults(hook FaultHook) (stop func()) {
	h := &hook
	c.faults.hook.Store(h)
	return func() { c.faults.hook.CompareAndSwap(h, nil) }
}

// faultFor asks the installed hook, if any, about one client request.
func (c *Cluster) faultFor(node int32, clientID string, req kmsg.Request) FaultAction {
	h := c.faults.hook.Load()
	if h == nil {
		return FaultAction{}
	}
	return (*h)(node, clientID, req)
}

// afterHandling runs the action's post-handling part and reports whether
// the answer must be dropped.
func (a FaultAction) afterHandling(resp kmsg.Response) (drop bool) {
	if a.AfterHandling != nil {
		a.AfterHandling(resp)
	}
	return a.Fault == DropAnswer
}
