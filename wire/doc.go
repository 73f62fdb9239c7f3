// Package wire is the wire format of KIP-1289, for kgo users who send the
// KIP-1289 message themselves and for the bundled broker: the request and
// response of TxnShareAcknowledge (key 95, v0, in the layout of
// apache/kafka PR #22357; docs/protocol.md names the commit), which kmsg
// does not know, the acknowledgement types, the feature levels a client
// checks before it sends it, and KgoMaxVersions, the version set a
// kgo.Client needs to send it at all.
//
// Applications that use kshare's clients never need this package: the
// acknowledgement vocabulary (kshare.AckType, kshare.ShareAcks) is in
// package kshare.
//
// The request and response types implement kmsg.Request and kmsg.Response,
// so they travel through kgo's transport (kgo.Client.Broker(id).Request)
// and are decoded by the bundled broker exactly like any kmsg message.
// Bytes that do not decode fail with ErrMalformed, which matches
// kshare.ErrUnsupported: a broker whose KIP-1289 messages differ from
// these is one kshare cannot use.
//
// The key number is the draft's (the KIP leaves it "TBD") and may still
// move before upstream merges; it lives in this package alone, so moving it
// is a one-line change.
package wire
