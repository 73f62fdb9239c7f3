package eos

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kshare-go/kshare"
	"github.com/kshare-go/kshare/broker"
)

// Command is one of the example commands as Main runs it: its name, help
// text, own flags and run. Main adds the flags every example has (Flags)
// and does the rest: parsing and validating, logging, the bundled cluster,
// progress, Ctrl-C, the report, the exit code.
type Command struct {
	// Name prefixes every line the command prints on stderr.
	Name string
	// Synopsis is the first line of the help text ("Usage: ...") and
	// Description what follows it, before the flags.
	Synopsis, Description string
	// LockDuration is the default of -lock-duration on the bundled
	// cluster.
	LockDuration time.Duration
	// Define adds the command's own flags to fs and returns a check of
	// their values, run after parsing; it returns a *FlagError, from
	// CheckPositive and friends, for a bad value.
	Define func(fs *flag.FlagSet) (check func() error)
	// Header describes the run in one line, printed on stderr before it
	// starts.
	Header func(f Flags, seeds []string) string
	// Run runs the pipeline and returns its report; an error means the run
	// could not be carried out (see eos.Run).
	Run func(ctx context.Context, f Flags, env Env) (Report, error)
}

// Flags holds the values of the flags every example has.
type Flags struct {
	Brokers      string
	Records      int
	Consumers    int
	RejectEvery  int
	LockDuration time.Duration
	MaxDuration  time.Duration
	// Ledger names the claim ledger topic ("": none): exactly-once
	// without KIP-1289.
	Ledger string
	// ReplicationFactor is the replication factor of the topics the run
	// creates (-1: the cluster's default).
	ReplicationFactor int
	Faults            bool
	JSON              bool
	LogLevel          string
}

// Env is what Main hands a command's Run: the cluster, a logger, and
// where to send progress.
type Env struct {
	Seeds    []string
	Logger   *slog.Logger
	Progress func(Progress)
}

// externalLockDuration is Apache Kafka's default
// group.share.min.record.lock.duration.ms: a group config below it is
// refused, so it is the default of -lock-duration with -brokers.
const externalLockDuration = 15 * time.Second

// commonFlagHelp explains the exit codes; every command's help ends with
// it.
const commonFlagHelp = `
It prints progress on stderr about once a second and ends with a table on
stdout and the verdict line:

  exactly-once: OK            every input was output exactly once in the
                              committed output (read_committed) and
                              acknowledged; inputs rejected or archived on
                              purpose are counted and shown        exit 0
  exactly-once: FAILED (...)  duplicates, lost inputs, inputs archived at the
                              delivery limit after failures, nothing written exit 1
  exactly-once: INCOMPLETE (...)
                              stopped early (Ctrl-C, -max-duration) with no
                              violation among what was processed   exit 3

A run that cannot be carried out (bad flags, a cluster that refuses the
setup, a fatal error that no injected fault explains, such as a cluster
without KIP-1289) prints the error on stderr (with -json, also a document
with verdict ERROR on stdout) and exits 2 at once. A second Ctrl-C stops
the command without a report.

Flags:
`

// Main runs cmd with the command-line arguments args, writing the report
// on stdout and everything else on stderr, and returns the exit code
// (ExitOK, ExitFailed, ExitError or ExitIncomplete). The first SIGINT or
// SIGTERM stops the run, which still reports; a second one ends the
// process.
func Main(cmd Command, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(cmd.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "%s\n\n%s\n%s", cmd.Synopsis, strings.TrimSpace(cmd.Description), commonFlagHelp)
		fs.PrintDefaults()
	}
	var f Flags
	fs.StringVar(&f.Brokers, "brokers", "", "comma-separated bootstrap `host:port` list of an external cluster, which must support KIP-932 share groups\nand KIP-1289 (default: a 3-node bundled cluster in this process)")
	fs.IntVar(&f.Records, "records", 100000, "input records to write and process, at least 1")
	fs.IntVar(&f.RejectEvery, "reject-every", 0, "write every `n`-th input as a poison record that the pipeline rejects on purpose:\nit is archived, has no output and is counted (0: none; else at least 2)")
	fs.DurationVar(&f.LockDuration, "lock-duration", cmd.LockDuration, "the group's share.record.lock.duration.ms, positive\n(default with -brokers: 15s, the least Apache Kafka accepts by default)")
	fs.StringVar(&f.Ledger, "ledger", "", "claim ledger `topic`: exactly-once without KIP-1289 (Apache Kafka as released); every transaction claims its\ninputs there, and a redelivered input already committed is settled from the ledger (created if missing)")
	fs.IntVar(&f.ReplicationFactor, "replication-factor", -1, "replication factor of the topics the run creates (-1: the cluster's default.replication.factor);\nnot of a missing -ledger topic, which the first Poll creates with the cluster's default")
	fs.BoolVar(&f.Faults, "faults", true, "inject the faults described above while running; -faults=false runs the pipeline alone")
	fs.DurationVar(&f.MaxDuration, "max-duration", 15*time.Minute, "stop after this long, setup and input included, and report what was processed (verdict INCOMPLETE), positive")
	fs.BoolVar(&f.JSON, "json", false, "write the report as one JSON document on stdout (fields \"verdict\" and \"ok\" carry the verdict);\nprogress and the verdict line go to stderr")
	fs.StringVar(&f.LogLevel, "log-level", "warn", "log from this `level` on: debug, info, warn or error; expected outcomes of injected faults log at info")
	check := cmd.Define(fs)
	// A refused command line still gives a -json reader its document,
	// when -json was parsed before the flag package stopped.
	refused := func(err error) int {
		if f.JSON {
			writeJSON(stdout, errorDocument(err))
		}
		return ExitError
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return refused(err) // the flag package has said why on stderr
	}
	logger, err := NewLogger(f.LogLevel, stderr)
	if err = errors.Join(err, f.check(fs), check()); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "%s: %s\n", cmd.Name, line)
		}
		fmt.Fprintf(stderr, "Run '%s -h' for the flags.\n", cmd.Name)
		return refused(err)
	}
	external := len(splitBrokers(f.Brokers)) > 0
	if external && !flagSet(fs, "lock-duration") {
		f.LockDuration = externalLockDuration
	}

	ctx, stopSignals := notifyInterrupt()
	defer stopSignals()
	fail := func(err error) int {
		code := ExitError
		verdict := VerdictError
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			code, verdict = ExitIncomplete, VerdictIncomplete
			err = fmt.Errorf("stopped by %v before the pipeline ran: %w", context.Cause(ctx), err)
		}
		if errors.Is(err, kshare.ErrUnsupported) && f.Ledger == "" {
			err = fmt.Errorf("%w\n(on a cluster without KIP-1289, run with -ledger TOPIC: exactly-once through a claim ledger)", err)
		}
		fmt.Fprintf(stderr, "%s: %v\n", cmd.Name, err)
		if f.JSON {
			doc := errorDocument(err)
			doc["verdict"] = verdict
			writeJSON(stdout, doc)
		}
		return code
	}
	seeds, closeCluster, err := clusterFor(f.Brokers, logger)
	if err != nil {
		return fail(err)
	}
	defer closeCluster()
	fmt.Fprintf(stderr, "%s: %s, brokers %s\n", cmd.Name, cmd.Header(f, seeds), strings.Join(seeds, ","))
	sum, err := cmd.Run(ctx, f, Env{
		Seeds:  seeds,
		Logger: logger,
		Progress: func(p Progress) {
			fmt.Fprintf(stderr, "%s: %s\n", cmd.Name, p)
		},
	})
	if err != nil {
		return fail(err)
	}
	if err := WriteReport(stdout, sum, f.JSON); err != nil {
		return fail(fmt.Errorf("writing the report: %w", err))
	}
	if f.JSON { // the JSON document stands alone on stdout
		fmt.Fprintln(stderr, sum.Outcome().Line())
	}
	return sum.Outcome().ExitCode()
}

// notifyInterrupt returns a context that the first SIGINT or SIGTERM
// cancels, its cause naming the signal; after it, the signals take their
// default action again, so that a second one ends the process. stop
// releases the signals and waits for the goroutine that watches them.
func notifyInterrupt() (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case s := <-sigs:
			signal.Stop(sigs)
			name := "SIGTERM"
			if s == os.Interrupt {
				name = "Ctrl-C (SIGINT)"
			}
			cancel(errors.New(name))
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		cancel(nil)
		<-done
	}
}

// errorDocument is the -json document of a run that could not be carried
// out: verdict ERROR and why.
func errorDocument(err error) map[string]any {
	return map[string]any{"verdict": VerdictError, "ok": false, "error": err.Error()}
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // nothing more to say if stdout is gone
}

// FlagError is a flag value that is refused, and why.
type FlagError struct {
	Flag, Value, Why string
}

func (e *FlagError) Error() string { return fmt.Sprintf("-%s %s: %s", e.Flag, e.Value, e.Why) }

func flagError(name, value, why string) error { return &FlagError{Flag: name, Value: value, Why: why} }

// CheckPositive refuses a value of flag name below 1.
func CheckPositive(name string, v int) error {
	if v < 1 {
		return flagError(name, fmt.Sprint(v), "must be at least 1")
	}
	return nil
}

// CheckNotNegative refuses a negative value of flag name.
func CheckNotNegative(name string, v int) error {
	if v < 0 {
		return flagError(name, fmt.Sprint(v), "must not be negative")
	}
	return nil
}

// CheckEvery refuses a value of an "every n-th" flag other than 0 (never)
// or at least 2: every single one would never let the run finish.
func CheckEvery(name string, v int) error {
	if v < 0 || v == 1 {
		return flagError(name, fmt.Sprint(v), "must be 0 (none) or at least 2")
	}
	return nil
}

// CheckDuration refuses a duration flag below min.
func CheckDuration(name string, d, min time.Duration) error {
	if d < min {
		why := "must be positive"
		if min > 1 {
			why = fmt.Sprintf("must be at least %v", min)
		}
		return flagError(name, d.String(), why)
	}
	return nil
}

// check validates the common flags.
func (f *Flags) check(fs *flag.FlagSet) error {
	var args, brokers error
	if fs.NArg() > 0 {
		args = fmt.Errorf("unexpected argument %q: every setting is a flag", fs.Arg(0))
	}
	if f.Brokers != "" && len(splitBrokers(f.Brokers)) == 0 {
		brokers = flagError("brokers", fmt.Sprintf("%q", f.Brokers), "names no broker")
	}
	return errors.Join(
		args,
		brokers,
		CheckPositive("records", f.Records),
		CheckEvery("reject-every", f.RejectEvery),
		CheckDuration("lock-duration", f.LockDuration, time.Millisecond),
		CheckDuration("max-duration", f.MaxDuration, 1),
		checkReplicationFactor(f.ReplicationFactor),
	)
}

// checkReplicationFactor refuses a -replication-factor that is neither -1
// nor a replica count Kafka accepts.
func checkReplicationFactor(rf int) error {
	if rf == -1 || (rf >= 1 && rf <= math.MaxInt16) {
		return nil
	}
	return flagError("replication-factor", fmt.Sprint(rf), "must be -1 (the cluster's default) or 1 to 32767")
}

// flagSet reports whether the command line set the flag.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// splitBrokers returns the addresses in s, the comma-separated value of a
// -brokers flag, with blanks trimmed and empty entries dropped; it returns
// nil when s names none.
func splitBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// clusterFor returns the seed brokers for a run from brokers, the value of
// a -brokers flag. When brokers names an external cluster, seeds are its
// addresses and closeFn does nothing; when it names none, clusterFor
// starts a 3-node bundled cluster in this process, logging to logger, and
// closeFn stops it. The error is the bundled cluster's failure to start.
func clusterFor(brokers string, logger *slog.Logger) (seeds []string, closeFn func(), err error) {
	if seeds = splitBrokers(brokers); len(seeds) > 0 {
		return seeds, func() {}, nil
	}
	// Any lock the -lock-duration flag takes: the bundled cluster is for
	// trying the pipeline out, short locks included.
	c, err := broker.NewCluster(broker.Nodes(3), broker.Logger(logger.With("component", "broker")),
		broker.ShareLockDurationBounds(time.Millisecond, time.Duration(math.MaxInt32)*time.Millisecond))
	if err != nil {
		return nil, nil, fmt.Errorf("bundled cluster: %w", err)
	}
	return c.Bootstrap(), func() { c.Close() }, nil
}
