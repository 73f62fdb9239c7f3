// Package wire defines the two KIP-1289 messages that kmsg does not know,
// AddShareAcksToTxn (key 96) and TxnShareAcknowledge (key 95), the feature
// gate a client checks before it sends them, and the small vocabulary that
// the share consumer, the producer and the acknowledger share: AckType,
// ShareAcks and ShareGroupMetadata.
//
// The request and response types implement kmsg.Request and kmsg.Response,
// so they travel through kgo's transport (kgo.Client.Broker(id).Request)
// and are decoded by the bundled broker exactly like any kmsg message.
//
// The key numbers are provisional (the KIP leaves them "TBD"); they live in
// this package alone, so moving them is a one-line change.
package wire
