package benthos

import (
	"github.com/redpanda-data/benthos/v4/public/service"
)

// The names the plugins register under.
const (
	InputName  = "kshare_share"
	OutputName = "kshare_txn"
	ReadName   = "kshare_read"
)

func init() {
	if err := Register(service.GlobalEnvironment()); err != nil {
		panic(err)
	}
}

// Register registers the kshare_share and kshare_read inputs and the
// kshare_txn output in env. Importing the package registers them in Benthos' global
// environment already; Register is for programs that build their own. It
// fails if env has components of these names.
func Register(env *service.Environment) error {
	err := env.RegisterBatchInput(InputName, inputSpec(),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchInput, error) {
			return newShareInput(conf, mgr)
		})
	if err != nil {
		return err
	}
	err = env.RegisterBatchInput(ReadName, readSpec(),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchInput, error) {
			return newReadInput(conf, mgr)
		})
	if err != nil {
		return err
	}
	return env.RegisterBatchOutput(OutputName, outputSpec(),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
			out, err := newTxnOutput(conf, mgr)
			if err != nil {
				return nil, service.BatchPolicy{}, 0, err
			}
			policy, err := conf.FieldBatchPolicy("batching")
			if err != nil {
				return nil, service.BatchPolicy{}, 0, err
			}
			return out, policy, out.cfg.inFlight, nil
		})
}
