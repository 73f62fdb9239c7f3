// Package draft1289_test checks the bundled broker against KIP-1289's
// draft (apache/kafka PR #22357, Shekharrajak/kafka branch
// kip-1289-txn-ack-share-groups) from outside kshare: its client encodes
// TxnShareAcknowledge v0 by hand from the draft's JSON field list
// (TxnShareAcknowledgeRequest.json at commit
// d4ddb080f4f54674451c5eca75564793062f1762), without kshare's wire
// package, and speaks it over a raw TCP connection. Everything around it
// (the share group, ShareFetch, InitProducerId, EndTxn) is kmsg's.
package draft1289_test
