// Package wire is the wire format of KIP-1289, for kgo users who send the
// two new messages themselves and for the bundled broker: the requests and
// responses of AddShareAcksToTxn (key 96) and TxnShareAcknowledge (key
// 95), which kmsg does not know, their acknowledgement types, the
// feature levels a client checks before it sends them, and
// KgoMaxVersions, the version set a kgo.Client needs to send them at all.
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
// The key numbers are provisional (the KIP leaves them "TBD"); they live in
// this package alone, so moving them is a one-line change.
package wire
