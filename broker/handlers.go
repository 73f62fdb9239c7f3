package broker

import (
	"fmt"
	"runtime/debug"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handler answers one request on the run loop. It returns the response, or
// nil when it answers later through request.respond (long polls). An error
// closes the client's connection.
type handler func(c *Cluster, r *request) (kmsg.Response, error)

// apiSpec is one API key the broker serves and the versions it serves.
type apiSpec struct {
	key      int16
	min, max int16
	handle   handler
	// shareTxn marks the KIP-1289 APIs, which the ShareTxnAPIs option
	// turns off.
	shareTxn bool
}

// apis is filled by the init function of each numbered file.
var apis = map[int16]apiSpec{}

func registerAPI(spec apiSpec) {
	if _, dup := apis[spec.key]; dup {
		panic(fmt.Sprintf("broker: API key %d registered twice", spec.key))
	}
	apis[spec.key] = spec
}

// api returns the spec of key if node n serves it, with the versions n
// serves: an old node (OldNodes) serves WriteTxnMarkers up to v1 only, and
// APIVersionCap lowers what a node serves, down to nothing.
func (c *Cluster) api(n *node, key int16) (apiSpec, bool) {
	spec, ok := apis[key]
	if !ok || (spec.shareTxn && !c.cfg.shareTxnAPIsEnabled) {
		return apiSpec{}, false
	}
	if n != nil && c.isOld(n.id) && key == writeTxnMarkersKey {
		spec.max = min(spec.max, oldNodeMarkerVersion)
	}
	if caps := c.cfg.versionCaps[key]; caps != nil {
		if capped, ok := caps[allNodes]; ok {
			spec.max = min(spec.max, capped)
		}
		if n != nil {
			if capped, ok := caps[n.id]; ok {
				spec.max = min(spec.max, capped)
			}
		}
		if spec.max < spec.min {
			return apiSpec{}, false
		}
	}
	return spec, true
}

// servedAPIs lists what node n serves, sorted by key.
func (c *Cluster) servedAPIs(n *node) []apiSpec {
	out := make([]apiSpec, 0, len(apis))
	for key := range apis {
		if spec, ok := c.api(n, key); ok {
			out = append(out, spec)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// dispatch runs on the loop: it tells observers, then answers.
func (c *Cluster) dispatch(r *request) {
	for _, fn := range c.observers {
		fn(r.node.id, r.kreq)
	}
	spec, ok := c.api(r.node, r.kreq.Key())
	if !ok {
		// Only internal requests can get here: handleFrame checks keys.
		r.respond(nil)
		return
	}
	resp, err := c.safeHandle(spec, r)
	if err != nil {
		c.logger.Warn("request failed", "node", r.node.id, "key", r.kreq.Key(), "err", err)
		if r.cc != nil {
			r.cc.conn.Close()
		}
		r.respond(nil)
		return
	}
	if resp != nil {
		r.respond(resp)
	}
}

// internalRequest sends kreq from one node to another through the same
// handlers the network uses, synchronously, on the loop. Only handlers that
// answer at once (never long polls) may be reached this way.
func (c *Cluster) internalRequest(to int32, kreq kmsg.Request) (kmsg.Response, error) {
	n := c.nodeByID(to)
	if n == nil {
		return nil, fmt.Errorf("broker: no node %d", to)
	}
	spec, ok := c.api(n, kreq.Key())
	if !ok {
		return nil, fmt.Errorf("broker: key %d not served", kreq.Key())
	}
	if v := kreq.GetVersion(); v < spec.min || v > spec.max {
		return nil, fmt.Errorf("broker: key %d version %d not served", kreq.Key(), v)
	}
	r := &request{node: n, kreq: kreq, clientID: "kshare-broker-internal", reply: make(chan kmsg.Response, 1)}
	c.dispatch(r)
	select {
	case resp := <-r.reply:
		if resp == nil {
			return nil, fmt.Errorf("broker: key %d gave no answer", kreq.Key())
		}
		return resp, nil
	default:
		return nil, fmt.Errorf("broker: key %d deferred an internal request", kreq.Key())
	}
}

// safeHandle runs a handler, turning a panic into an error that closes the
// client's connection: one bad request must not stop the cluster. A panic
// is a bug; it is logged with its stack and counted, and the tests and the
// fuzz target fail on any.
func (c *Cluster) safeHandle(spec apiSpec, r *request) (resp kmsg.Response, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.handlerPanics++
			c.logger.Error("handler panicked", "key", spec.key, "panic", p, "stack", string(debug.Stack()))
			resp, err = nil, fmt.Errorf("handler for key %d panicked: %v", spec.key, p)
		}
	}()
	return spec.handle(c, r)
}

// topicSlots numbers the distinct topic names of a request in the order
// it first names them, for answers that list each topic once whatever the
// request repeats (ListOffsets, DeleteRecords).
type topicSlots map[string]int

// slot returns name's number, calling add the first time name is seen.
func (s topicSlots) slot(name string, add func()) int {
	if i, ok := s[name]; ok {
		return i
	}
	i := len(s)
	s[name] = i
	add()
	return i
}

// setError fills an answer's error code and, when msg is not empty, its
// error message.
func setError(code *int16, message **string, err *kerr.Error, msg string) {
	*code = err.Code
	if msg != "" {
		*message = &msg
	}
}
