// Command kshare-benthos is Benthos with kshare's exactly-once share-group
// components: the open-core Benthos distribution (its pure and io
// components) plus the kshare_share and kshare_read inputs, the kshare_txn
// output and a Prometheus metrics exporter. It takes Benthos' own command
// line:
//
//	kshare-benthos -c pipeline.yaml
//	kshare-benthos list inputs
//
// Two of Benthos' defaults differ: the HTTP server binds 127.0.0.1:4195
// (Benthos binds every interface, 0.0.0.0:4195; set http.address to serve
// others), and the metrics exporter is prometheus, served on the HTTP
// server's /metrics.
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
	_ "github.com/kshare-go/kshare/connectors/benthos/prometheus"
)

// httpAddress is the default address of Benthos' HTTP server (its API,
// /ping, /ready, /metrics): the loopback interface only.
const httpAddress = "127.0.0.1:4195"

// schema is Benthos' configuration schema with kshare-benthos' defaults.
func schema() *service.ConfigSchema {
	s := service.GlobalEnvironment().FullConfigSchema("", "")
	s.SetFieldDefault(httpAddress, "http", "address")
	return s
}

func main() {
	service.RunCLI(context.Background(), service.CLIOptSetMainSchemaFrom(schema))
}
