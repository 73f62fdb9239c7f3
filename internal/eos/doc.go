// Package eos is the exactly-once harness of examples/ctp and
// examples/checkpoint: everything around a pipeline but the pipeline
// itself. The pipelines' loops are the examples' own code (a
// consume-transform-produce worker, a checkpointing source reader, in
// plain SDK calls); this package sets up the topics and the group, writes
// input records with unique ids, runs the loops (Run, RunCheckpoint) while
// injecting faults through hooks the loops call, follows their progress,
// and verifies the outcome.
//
// An input record's value is its id; the transform under test writes one
// output record whose value is the same id, and rejects poison records
// (RejectEvery). The verdict (NewResult) is OK only when the committed
// output holds every input id exactly once and the group has acknowledged
// every input, poison inputs rejected and inputs archived after deliberate
// aborts being counted and shown; FAILED for duplicates, lost inputs,
// inputs archived at the delivery limit after failures, outputs that
// should not exist and a run that wrote nothing; INCOMPLETE for a run
// stopped early (Ctrl-C, MaxDuration) with no violation among what it
// processed. Run reads the output topic with a read_committed reader;
// RunCheckpoint checks the in-memory sink that each completed checkpoint
// commits to. A worker error that no injected fault explains (a fatal SDK
// error, for example) stops the run at once.
//
// Main runs either example as a command: shared flags and their checks,
// the bundled cluster, progress, Ctrl-C, the report (a table, or one JSON
// document) and the exit codes.
package eos
