// Command kshare-benthos is Benthos with kshare's exactly-once share-group
// components: the open-core Benthos distribution (its pure and io
// components) plus the kshare_share input and the kshare_txn output. It
// takes Benthos' own command line:
//
//	kshare-benthos -c pipeline.yaml
//	kshare-benthos list inputs
//
// See connectors/benthos/README.md for the components and an example
// pipeline.
package main

import (
	"context"

	"github.com/redpanda-data/benthos/v4/public/service"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure/extended"

	_ "github.com/kshare-go/kshare/connectors/benthos"
)

func main() {
	service.RunCLI(context.Background())
}
