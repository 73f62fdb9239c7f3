// Command bench measures kshare against its alternatives, on the same
// machine in the same run, and prints one table of ratios:
//
//   - the exactly-once share CTP (kshare) against kgo's at-least-once share
//     CTP and kgo's exactly-once consumer-group CTP, 100 B and 1 KiB
//     records, with commit latencies and their floor (the same round trips
//     done bare), and with a claim ledger against KIP-1289;
//   - with -kafka, the same pipelines on an Apache Kafka cluster, where
//     kshare's exactly-once share CTP runs with a claim ledger;
//   - the kshare producer and share consumer against kgo's;
//   - the bundled broker against franz-go's kfake under kgo workloads;
//   - scaling of one partition over 1, 2, 4 and 8 exactly-once share
//     consumers with 1 ms of work per record;
//   - broker bytes per stored record and client allocations per record.
//
// Contenders alternate (their order rotates every round) and each figure
// is the median of the rounds; a ratio is the median of the rounds'
// ratios. Brokers run as child processes of this command. Usage:
//
//	cd bench && go run .            # the full run (several minutes)
//	go run . -short                 # what CI runs: small, checks that it works
//	go run . -json                  # one JSON document on stdout
//	go run . -only 'ctp|scaling'    # some sections
//	go run . -only kafka -kafka 127.0.0.1:9092   # on Apache Kafka (claim ledger)
//
// It exits 1 when a workload fails (an error, a lost or duplicated record
// in an exactly-once pipeline), never because of a ratio: the targets are
// printed for people to read. docs/performance.md has the table and the
// machine it was measured on.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"
)

// settings are the sizes of a run.
type settings struct {
	Rounds        int     `json:"rounds"`
	Nodes         int     `json:"nodes"`
	Partitions    int     `json:"partitions"`
	Workers       int     `json:"workers"`
	TxnSize       int     `json:"txn_size"`
	CTPRecords    [2]int  `json:"ctp_records"` // 100 B, 1 KiB
	FloorCommits  int     `json:"floor_commits"`
	SDKRecords    int     `json:"sdk_records"`
	BrokerRecords int     `json:"broker_records"`
	PerConsumer   int     `json:"scaling_records_per_consumer"`
	ScalingTxn    int     `json:"scaling_txn_size"`
	Work          string  `json:"scaling_work_per_record"`
	Timeout       string  `json:"run_timeout"`
	Scale         float64 `json:"scale"`
	work, timeout time.Duration
}

func fullSettings() settings {
	return settings{
		Rounds: 5, Nodes: 3, Partitions: 6, Workers: 4, TxnSize: 500,
		CTPRecords: [2]int{500_000, 200_000}, FloorCommits: 300,
		SDKRecords: 1_000_000, BrokerRecords: 300_000,
		PerConsumer: 2000, ScalingTxn: 25,
		work: time.Millisecond, timeout: 5 * time.Minute,
	}
}

func shortSettings() settings {
	return settings{
		Rounds: 1, Nodes: 3, Partitions: 6, Workers: 4, TxnSize: 500,
		CTPRecords: [2]int{30_000, 10_000}, FloorCommits: 30,
		SDKRecords: 20_000, BrokerRecords: 10_000,
		PerConsumer: 200, ScalingTxn: 25,
		work: time.Millisecond, timeout: 2 * time.Minute,
	}
}

func (s *settings) scale(f float64) {
	if f == 1 {
		return
	}
	n := func(x int) int { return max(1, int(float64(x)*f)) }
	s.CTPRecords = [2]int{n(s.CTPRecords[0]), n(s.CTPRecords[1])}
	s.FloorCommits, s.SDKRecords, s.BrokerRecords, s.PerConsumer = n(s.FloorCommits), n(s.SDKRecords), n(s.BrokerRecords), n(s.PerConsumer)
}

func main() {
	var (
		short      = flag.Bool("short", false, "small sizes and one round: checks that every workload works (CI)")
		asJSON     = flag.Bool("json", false, "print one JSON document instead of the table")
		asMarkdown = flag.Bool("markdown", false, "print the table as Markdown (docs/performance.md) after the plain one")
		rounds     = flag.Int("rounds", 0, "rounds (0: 5, or 1 with -short)")
		only       = flag.String("only", "", "run only the sections matching this regexp (ctp, sdk, brokers, scaling, kafka)")
		contenders = flag.String("contenders", "", "in the ctp section, run only the contenders matching this regexp (kshare-eos, kshare-eos-ledger, kgo-share-alo, kgo-group-eos, floor; for profiling)")
		scale      = flag.Float64("scale", 1, "multiply every record count by this")
		cpuProfile = flag.String("cpuprofile", "", "write the clients' CPU profile here")
		memProfile = flag.String("memprofile", "", "write the clients' allocation profile here")
		brokerProf = flag.String("broker-cpuprofile", "", "write the bundled broker's CPU profile here")
		kafka      = flag.String("kafka", "", "comma-separated bootstrap `host:port` list of an Apache Kafka cluster: section kafka runs the\nexactly-once share pipeline with a claim ledger against kgo's pipelines on it")
	)
	if serveIfChild() {
		return
	}
	flag.Parse()
	st := fullSettings()
	if *short {
		st = shortSettings()
	}
	if *rounds > 0 {
		st.Rounds = *rounds
	}
	if *scale <= 0 {
		fmt.Fprintln(os.Stderr, "bench: -scale must be positive")
		os.Exit(2)
	}
	st.Scale = *scale
	st.scale(*scale)
	st.Work, st.Timeout = st.work.String(), st.timeout.String()
	sections, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: -only:", err)
		os.Exit(2)
	}
	pick, err := regexp.Compile(*contenders)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: -contenders:", err)
		os.Exit(2)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
		defer f.Close()
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	b := &bench{st: st, res: make(results), brokerProfile: *brokerProf, pick: pick}
	if *kafka != "" {
		var seeds []string
		for _, s := range strings.Split(*kafka, ",") {
			if s = strings.TrimSpace(s); s != "" {
				seeds = append(seeds, s)
			}
		}
		e, err := newExternalEnv(seeds)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -kafka:", err)
			os.Exit(2)
		}
		defer e.close()
		b.kafka = e
	}
	rep, err := b.run(ctx, sections)
	if *memProfile != "" {
		if f, ferr := os.Create(*memProfile); ferr == nil {
			pprof.Lookup("allocs").WriteTo(f, 0)
			f.Close()
		}
	}
	if rep != nil {
		if *asJSON {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			enc.Encode(rep)
		} else {
			rep.print(os.Stdout)
			if *asMarkdown {
				fmt.Println()
				fmt.Print(rep.markdown())
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: FAILED:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// machine describes where the run happened.
type machine struct {
	CPU        string `json:"cpu"`
	Cores      int    `json:"cores"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Go         string `json:"go"`
	OS         string `json:"os"`
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
	Started    string `json:"started"`
	Seconds    int    `json:"seconds"`
}

func describeMachine() machine {
	return machine{
		CPU:        cpuModel(),
		Cores:      runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		Go:         runtime.Version(),
		OS:         runtime.GOOS + "/" + runtime.GOARCH,
		LoadBefore: loadAvg(),
		Started:    time.Now().UTC().Format(time.RFC3339),
	}
}

func cpuModel() string {
	raw, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if name, value, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return "unknown"
}

func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	var a, b, c string
	fmt.Sscanf(string(raw), "%s %s %s", &a, &b, &c)
	return a + " " + b + " " + c
}
