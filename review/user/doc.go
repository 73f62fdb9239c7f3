// Package user holds the reproducers of a review of kshare's user-facing
// programs (examples/ctp, examples/checkpoint, cmd/kshare-broker and the
// Benthos distribution) played as a new user. Each test builds the
// commands, runs them with os/exec as a user would and asserts what the
// documentation promises; a test that fails shows a finding (see
// /work/notes/review-user.md). Every process a test starts is bounded by a
// timeout and killed at the end.
//
// The tests need the build tag "review", so that `go test ./...` (and CI)
// does not run them: most of them fail today, on purpose. Run them with
//
//	go test -tags review -count=1 -v ./review/user/
package user
