package broker

// ApiVersions (key 18).
//
// Versions: 0-4. An unsupported ApiVersions version is answered in v0 with
// UNSUPPORTED_VERSION and the key list, as the protocol says.
//
// Behaviour:
//   - Advertises exactly the keys and versions the handlers serve at the
//     node asked (an old node, OldNodes, serves WriteTxnMarkers up to v1).
//   - Finalized features: transaction.version=2, and share.version 3 with
//     the KIP-1289 API on, 1 without it (a KIP-932 broker). In the draft's
//     ShareVersion level 3 (KIP-1289) includes level 2, Kafka 4.4's
//     share-group DLQ (KIP-1191), which this broker serves (share_dlq.go)
//     at level 3 and, like Kafka below level 2, not at level 1.
//
// Skipped:
//   - v5's cluster and node id checks (KIP-1242).

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kshare-go/kshare/wire"
)

func init() {
	registerAPI(apiSpec{key: 18, min: 0, max: 4, handle: handleApiVersions})
}

func handleApiVersions(c *Cluster, r *request) (kmsg.Response, error) {
	resp := kmsg.NewPtrApiVersionsResponse()
	c.fillApiVersions(resp, r.node)
	shareLevel := int16(1)
	if c.cfg.shareTxnAPIsEnabled {
		shareLevel = wire.MinShareVersionForTxnAcks
	}
	resp.SupportedFeatures = []kmsg.ApiVersionsResponseSupportedFeature{
		{Name: wire.TransactionVersionFeature, MinVersion: 0, MaxVersion: wire.MinTransactionVersionForTV2},
		{Name: wire.ShareVersionFeature, MinVersion: 0, MaxVersion: shareLevel},
	}
	resp.FinalizedFeaturesEpoch = 1
	resp.FinalizedFeatures = []kmsg.ApiVersionsResponseFinalizedFeature{
		{Name: wire.TransactionVersionFeature, MinVersionLevel: wire.MinTransactionVersionForTV2, MaxVersionLevel: wire.MinTransactionVersionForTV2},
		{Name: wire.ShareVersionFeature, MinVersionLevel: shareLevel, MaxVersionLevel: shareLevel},
	}
	return resp, nil
}

func (c *Cluster) fillApiVersions(resp *kmsg.ApiVersionsResponse, n *node) {
	for _, spec := range c.servedAPIs(n) {
		resp.ApiKeys = append(resp.ApiKeys, kmsg.ApiVersionsResponseApiKey{
			ApiKey:     spec.key,
			MinVersion: spec.min,
			MaxVersion: spec.max,
		})
	}
}

func (c *Cluster) unsupportedApiVersions(n *node) kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	c.fillApiVersions(resp, n)
	return resp
}
