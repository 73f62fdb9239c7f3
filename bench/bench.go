package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/kshare-go/kshare/wire"
)

// bench runs the sections and keeps their samples.
type bench struct {
	st            settings
	res           results
	brokerProfile string
	pick          *regexp.Regexp // CTP contenders to run
	bundled       *env
	kafka         *env // -kafka: an Apache Kafka cluster, or nil
}

// section is one group of alternating contenders.
type section struct {
	name string
	run  func(ctx context.Context) error
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// rotate returns xs rotated left by r: round r's order.
func rotate[T any](xs []T, r int) []T {
	k := r % len(xs)
	return append(append([]T(nil), xs[k:]...), xs[:k]...)
}

// run runs the sections that match and returns the report of what ran.
func (b *bench) run(ctx context.Context, match *regexp.Regexp) (*report, error) {
	m := describeMachine()
	start := time.Now()
	rep := func() *report {
		m.LoadAfter, m.Seconds = loadAvg(), int(time.Since(start).Seconds())
		return b.report(m)
	}
	var err error
	b.bundled, err = newEnv(bundled, b.st.Nodes, b.st.Partitions, b.brokerProfile)
	if err != nil {
		return nil, err
	}
	defer func() {
		if b.bundled != nil {
			b.bundled.close()
		}
	}()
	for _, s := range []section{
		{"ctp", b.ctpSection},
		{"sdk", b.sdkSection},
		{"brokers", b.brokersSection},
		{"scaling", b.scalingSection},
		{"kafka", b.kafkaSection},
	} {
		if !match.MatchString(s.name) {
			continue
		}
		progress("section %s", s.name)
		if err := s.run(ctx); err != nil {
			return rep(), fmt.Errorf("section %s: %w", s.name, err)
		}
	}
	return rep(), nil
}

// pipelineFn is one CTP contender.
type pipelineFn func(ctx context.Context, e *env, s ctpSpec, output string) (sample, error)

type pipelineContender struct {
	name string
	fn   pipelineFn
	eos  bool // duplicates are a failure
}

// verdict fails an exactly-once pipeline that committed an input twice
// (or an input it was not given): a bench that measured a broken pipeline
// measured nothing. At-least-once pipelines may duplicate.
func (c pipelineContender) verdict(s sample) error {
	if c.eos && s.Dups > 0 {
		return fmt.Errorf("%s: %d inputs committed twice by an exactly-once pipeline", c.name, s.Dups)
	}
	return nil
}

// runCTP runs one pipeline contender on the bundled broker.
func (b *bench) runCTP(ctx context.Context, c pipelineContender, spec ctpSpec) (sample, error) {
	return b.runCTPOn(ctx, b.bundled, c, spec)
}

// runCTPOn runs one pipeline contender on e into a fresh output topic and
// checks its outcome.
func (b *bench) runCTPOn(ctx context.Context, e *env, c pipelineContender, spec ctpSpec) (sample, error) {
	output := e.name("out")
	if err := e.createTopic(ctx, output, spec.partitions); err != nil {
		return sample{}, err
	}
	defer e.deleteTopics(context.Background(), output)
	before, err := e.b.stats()
	if err != nil {
		return sample{}, err
	}
	cpu0 := cpuNanos()
	s, err := c.fn(ctx, e, spec, output)
	if err != nil {
		return sample{}, fmt.Errorf("%s: %w", c.name, err)
	}
	s.ClientCPU = float64(cpuNanos()-cpu0) / float64(spec.records)
	after, err := e.b.stats()
	if err != nil {
		return sample{}, err
	}
	s.BrokerCPU = float64(after.cpu-before.cpu) / float64(spec.records)
	s.Requests = requestsPer1000(before, after, spec.records)
	if err := c.verdict(s); err != nil {
		return s, err
	}
	ledger := ""
	if s.LedgerPollMs > 0 {
		ledger = fmt.Sprintf("  ledger %.2f ms/poll", s.LedgerPollMs)
	}
	progress("  %-17s %8.0f rec/s  commit p50 %6.2f p99 %6.2f ms  aborts %d dups %d  client %.1f allocs/rec %.1f us/rec  broker %.1f us/rec%s  requests per 1000 records:%s",
		c.name, s.Rate, s.P50, s.P99, s.Aborts, s.Dups, s.Allocs, s.ClientCPU/1e3, s.BrokerCPU/1e3, ledger, requestsString(s.Requests))
	return s, nil
}

// requestsPer1000 is the requests the broker received between two stats,
// per 1000 records, by API name.
func requestsPer1000(before, after brokerStats, records int) map[string]float64 {
	out := make(map[string]float64)
	for k, n := range after.requests {
		if d := n - before.requests[k]; d > 0 {
			out[wire.NameForKey(k)] = float64(d) * 1000 / float64(records)
		}
	}
	return out
}

// requestsString is " Name:n ..." for the counts at least 0.1, by name.
func requestsString(per1000 map[string]float64) string {
	names := make([]string, 0, len(per1000))
	for name, n := range per1000 {
		if n >= 0.1 {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		fmt.Fprintf(&b, " %s:%.1f", name, per1000[name])
	}
	return b.String()
}

// sizes are the record sizes of the CTP section.
var sizes = []struct {
	name  string
	bytes int
}{{"100B", 100}, {"1KiB", 1024}}

func (b *bench) ctpSection(ctx context.Context) error {
	return b.pipelines(ctx, b.bundled, "ctp", []pipelineContender{
		{"kshare-eos", kshareEOS, true},
		{"kshare-eos-ledger", kshareLedgerEOS, true},
		{"kgo-share-alo", kgoShareALO, false},
		{"kgo-group-eos", kgoGroupEOS, true},
		{"floor", nil, false},
	})
}

// kafkaSection runs the pipelines on an Apache Kafka cluster (-kafka),
// which has no KIP-1289: kshare's exactly-once share pipeline with the
// claim ledger against kgo's at-least-once share pipeline and kgo's
// exactly-once consumer-group pipeline.
func (b *bench) kafkaSection(ctx context.Context) error {
	if b.kafka == nil {
		return nil
	}
	return b.pipelines(ctx, b.kafka, "kafka", []pipelineContender{
		{"kshare-eos-ledger", kshareLedgerEOS, true},
		{"kgo-share-alo", kgoShareALO, false},
		{"kgo-group-eos", kgoGroupEOS, true},
	})
}

// pipelines runs contenders on e, in alternating rounds, for each record
// size; their samples are keyed prefix/size/contender.
func (b *bench) pipelines(ctx context.Context, e *env, prefix string, contenders []pipelineContender) error {
	st := b.st
	for si, size := range sizes {
		spec := ctpSpec{
			input: e.name("ctp-in"), partitions: st.Partitions, records: st.CTPRecords[si],
			workers: st.Workers, txnSize: st.TxnSize, timeout: st.timeout,
		}
		if err := e.createTopic(ctx, spec.input, spec.partitions); err != nil {
			return err
		}
		if err := e.fillInput(ctx, spec.input, spec.partitions, spec.records, size.bytes, 0); err != nil {
			return err
		}
		for r := range st.Rounds {
			progress(" %s %s round %d", prefix, size.name, r+1)
			for _, c := range rotate(contenders, r) {
				if !b.pick.MatchString(c.name) {
					continue
				}
				key := prefix + "/" + size.name + "/" + c.name
				if c.fn == nil {
					s, err := measureFloor(ctx, e, floorSpec{commits: st.FloorCommits, txnSize: st.TxnSize, valueSize: size.bytes})
					if err != nil {
						return err
					}
					progress("  %-14s commit p50 %6.2f p99 %6.2f ms", c.name, s.P50, s.P99)
					b.res.add(key, s)
					continue
				}
				s, err := b.runCTPOn(ctx, e, c, spec)
				if err != nil {
					return err
				}
				b.res.add(key, s)
			}
		}
		if err := e.deleteTopics(ctx, spec.input); err != nil {
			return err
		}
	}
	return nil
}

// loadFn is one single-client workload.
type loadFn func(ctx context.Context, e *env, s loadSpec) (sample, error)

func (b *bench) sdkSection(ctx context.Context) error {
	e, st := b.bundled, b.st
	prodSpec := loadSpec{partitions: st.Partitions, records: st.SDKRecords / 2, valueSize: 100, txnSize: 1000, timeout: st.timeout}
	consSpec := loadSpec{topic: e.name("sdk-in"), partitions: st.Partitions, records: st.SDKRecords, valueSize: 100, timeout: st.timeout}
	if err := e.createTopic(ctx, consSpec.topic, consSpec.partitions); err != nil {
		return err
	}
	if err := e.fillInput(ctx, consSpec.topic, consSpec.partitions, consSpec.records, consSpec.valueSize, 0); err != nil {
		return err
	}
	defer e.deleteTopics(context.Background(), consSpec.topic)
	type contender struct {
		key  string
		fn   loadFn
		spec loadSpec
		own  bool // writes into a fresh topic
	}
	producers := []contender{{"sdk/producer/kshare", kshareTxnProduce, prodSpec, true}, {"sdk/producer/kgo", kgoTxnProduce, prodSpec, true}}
	consumers := []contender{{"sdk/share-consumer/kshare", kshareShareConsume, consSpec, false}, {"sdk/share-consumer/kgo", kgoShareConsume, consSpec, false}}
	for r := range st.Rounds {
		progress(" sdk round %d", r+1)
		for _, c := range append(rotate(producers, r), rotate(consumers, r)...) {
			spec := c.spec
			if c.own {
				spec.topic = e.name("sdk-out")
				if err := e.createTopic(ctx, spec.topic, spec.partitions); err != nil {
					return err
				}
			}
			s, err := c.fn(ctx, e, spec)
			if c.own {
				e.deleteTopics(context.Background(), spec.topic)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", c.key, err)
			}
			progress("  %-26s %8.0f rec/s  client %.1f allocs/rec %.0f B/rec %.1f us/rec  broker %.1f us/rec", c.key, s.Rate, s.Allocs, s.AllocBytes, s.ClientCPU/1e3, s.BrokerCPU/1e3)
			b.res.add(c.key, s)
		}
	}
	return nil
}

func (b *bench) brokersSection(ctx context.Context) error {
	st := b.st
	kf, err := newEnv(kfakeKind, st.Nodes, st.Partitions, "")
	if err != nil {
		return err
	}
	defer kf.close()
	envs := []*env{b.bundled, kf}
	spec := loadSpec{partitions: st.Partitions, records: st.BrokerRecords, valueSize: 1024, txnSize: 1000, timeout: st.timeout}
	small := spec
	small.valueSize = 100
	txnSpec := spec
	txnSpec.records = max(1, st.BrokerRecords/2)
	workloads := []struct {
		name string
		fn   loadFn
		spec loadSpec
		own  bool // a fresh topic, deleted after
	}{
		{"produce", kgoProduce, spec, false}, // writes the topic the readers read
		{"consume", kgoConsume, spec, false},
		{"share-consume", kgoShareConsume, spec, false},
		{"txn-produce", kgoTxnProduce, txnSpec, true},
		{"produce-100B", kgoProduce, small, true}, // broker bytes per stored 100 B record
	}
	for r := range st.Rounds {
		progress(" brokers round %d", r+1)
		topics := make(map[*env]string)
		for _, e := range envs {
			topics[e] = e.name("brk")
			if err := e.createTopic(ctx, topics[e], spec.partitions); err != nil {
				return err
			}
		}
		for _, w := range workloads {
			for _, e := range rotate(envs, r) {
				s := w.spec
				s.topic = topics[e]
				if w.own {
					s.topic = e.name("brk-own")
					if err := e.createTopic(ctx, s.topic, s.partitions); err != nil {
						return err
					}
				}
				res, err := w.fn(ctx, e, s)
				if w.own {
					e.deleteTopics(context.Background(), s.topic)
				}
				if err != nil {
					return fmt.Errorf("%s on %s: %w", w.name, e.b.kind, err)
				}
				key := "brokers/" + w.name + "/" + e.b.kind
				progress("  %-32s %8.0f rec/s  client %.1f us/rec  broker %.1f us/rec, heap %+.0f B/rec", key, res.Rate, res.ClientCPU/1e3, res.BrokerCPU/1e3, res.BrokerHeap)
				b.res.add(key, res)
			}
		}
		for _, e := range envs {
			if err := e.deleteTopics(ctx, topics[e]); err != nil {
				return err
			}
		}
	}
	return nil
}

// scalingCounts are the consumer counts of the scaling section.
var scalingCounts = []int{1, 2, 4, 8}

func (b *bench) scalingSection(ctx context.Context) error {
	e, st := b.bundled, b.st
	input := e.name("scale-in")
	most := scalingCounts[len(scalingCounts)-1]
	if err := e.createTopic(ctx, input, 1); err != nil {
		return err
	}
	defer e.deleteTopics(context.Background(), input)
	if err := e.fillInput(ctx, input, 1, most*st.PerConsumer, 100, st.ScalingTxn); err != nil {
		return err
	}
	c := pipelineContender{"kshare-eos", kshareEOS, true}
	for r := range st.Rounds {
		progress(" scaling round %d", r+1)
		for _, n := range rotate(scalingCounts, r) {
			spec := ctpSpec{
				input: input, partitions: 1, records: n * st.PerConsumer, inputs: most * st.PerConsumer, workers: n,
				txnSize: st.ScalingTxn, work: st.work, timeout: st.timeout,
			}
			s, err := b.runCTP(ctx, pipelineContender{fmt.Sprintf("%s x%d", c.name, n), c.fn, true}, spec)
			if err != nil {
				return err
			}
			b.res.add(fmt.Sprintf("scaling/%d", n), s)
		}
	}
	return nil
}

// report builds the table from what ran.
func (b *bench) report(m machine) *report {
	rep := &report{Machine: m, Settings: b.st, Samples: b.res}
	for _, size := range sizes {
		k := func(c string) string { return "ctp/" + size.name + "/" + c }
		rep.compare("ctp", "EOS share CTP (kshare) vs EOS consumer-group CTP (kgo), "+size.name, k("kshare-eos"), k("kgo-group-eos"), rate, target{true, 0.8})
		rep.compare("ctp", "EOS share CTP (kshare) vs at-least-once share CTP (kgo), "+size.name, k("kshare-eos"), k("kgo-share-alo"), rate, target{true, 1.0})
		rep.compare("ctp", "EOS share CTP (kshare): claim ledger vs KIP-1289, "+size.name, k("kshare-eos-ledger"), k("kshare-eos"), rate, target{true, 0.8})
		rep.compare("commit", "EOS share commit: claim ledger vs KIP-1289, p50, "+size.name, k("kshare-eos-ledger"), k("kshare-eos"), p50, target{})
		rep.against("commit", "what the claim ledger adds to a Poll, "+size.name, k("kshare-eos-ledger"), ledgerPoll, 1, "1 ms", target{})
		rep.compare("commit", "EOS share commit vs consumer-group EOS commit, p50, "+size.name, k("kshare-eos"), k("kgo-group-eos"), p50, target{false, 1.5})
		rep.compare("commit", "EOS share commit vs consumer-group EOS commit, p99, "+size.name, k("kshare-eos"), k("kgo-group-eos"), p99, target{})
		rep.compare("commit", "EOS share commit vs floor (bare round trips), p50, "+size.name, k("kshare-eos"), k("floor"), p50, target{})
		rep.compare("commit", "EOS share commit vs floor (bare round trips), p99, "+size.name, k("kshare-eos"), k("floor"), p99, target{false, 3})
	}
	for _, size := range sizes {
		k := func(c string) string { return "kafka/" + size.name + "/" + c }
		rep.compare("kafka", "Apache Kafka: EOS share CTP with the claim ledger (kshare) vs EOS consumer-group CTP (kgo), "+size.name, k("kshare-eos-ledger"), k("kgo-group-eos"), rate, target{true, 0.8})
		rep.compare("kafka", "Apache Kafka: EOS share CTP with the claim ledger (kshare) vs at-least-once share CTP (kgo), "+size.name, k("kshare-eos-ledger"), k("kgo-share-alo"), rate, target{})
		rep.compare("kafka", "Apache Kafka: ledger commit vs consumer-group EOS commit, p50, "+size.name, k("kshare-eos-ledger"), k("kgo-group-eos"), p50, target{})
		rep.against("kafka", "Apache Kafka: what the claim ledger adds to a Poll, "+size.name, k("kshare-eos-ledger"), ledgerPoll, 1, "1 ms", target{})
	}
	rep.compare("sdk", "kshare producer vs kgo transactional producer", "sdk/producer/kshare", "sdk/producer/kgo", rate, target{true, 1.0})
	rep.compare("sdk", "kshare share consumer vs kgo share consumer", "sdk/share-consumer/kshare", "sdk/share-consumer/kgo", rate, target{true, 1.0})
	for _, w := range []struct {
		name, what string
		bound      float64
	}{
		{"produce", "produce (kgo, 1 KiB)", 1.2},
		{"consume", "consume (kgo, 1 KiB)", 1.2},
		{"txn-produce", "transactional produce (kgo, 1 KiB)", 1.2},
		{"share-consume", "share consume (kgo, 1 KiB)", 1.5},
	} {
		rep.compare("brokers", "bundled vs kfake: "+w.what, "brokers/"+w.name+"/bundled", "brokers/"+w.name+"/kfake", rate, target{true, w.bound})
	}
	rep.compare("brokers", "bundled: kgo share consume vs kgo consume (1 KiB)", "brokers/share-consume/bundled", "brokers/consume/bundled", rate, target{true, 0.7})
	for _, n := range scalingCounts[1:] {
		t := target{}
		switch n {
		case 4:
			t = target{true, 3.5}
		case 8:
			t = target{true, 6}
		}
		rep.compare("scaling", fmt.Sprintf("one partition, 1 ms/record, EOS: %d share consumers vs 1", n), fmt.Sprintf("scaling/%d", n), "scaling/1", rate, t)
	}
	rep.against("memory", "bundled broker heap per stored 1 KiB record", "brokers/produce/bundled", heapPerRec, 1024, "1024 B of value", target{false, 1.1})
	rep.compare("memory", "broker heap per stored 1 KiB record: bundled vs kfake", "brokers/produce/bundled", "brokers/produce/kfake", heapPerRec, target{})
	rep.against("memory", "bundled broker heap per stored 100 B record", "brokers/produce-100B/bundled", heapPerRec, 100, "100 B of value", target{})
	rep.compare("memory", "client allocations per record: kshare producer vs kgo", "sdk/producer/kshare", "sdk/producer/kgo", allocs, target{})
	rep.compare("memory", "client bytes per record: kshare producer vs kgo", "sdk/producer/kshare", "sdk/producer/kgo", allocBytes, target{})
	rep.compare("memory", "client allocations per record: kshare share consumer vs kgo", "sdk/share-consumer/kshare", "sdk/share-consumer/kgo", allocs, target{})
	rep.compare("memory", "client bytes per record: kshare share consumer vs kgo", "sdk/share-consumer/kshare", "sdk/share-consumer/kgo", allocBytes, target{})
	rep.compare("memory", "client allocations per record: EOS share CTP vs EOS consumer-group CTP, 100B", "ctp/100B/kshare-eos", "ctp/100B/kgo-group-eos", allocs, target{})
	return rep
}
