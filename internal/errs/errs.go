// Package errs builds the errors of kshare's error vocabulary: every error
// a kshare package returns matches exactly one class of package kshare
// (ErrAbortable, ErrInDoubt, ErrCommitted, ErrFatal, ErrUnsupported,
// ErrUsage, ErrClosed) with errors.Is, and keeps its cause reachable with
// errors.Is and errors.As.
//
// "Exactly one" is kept by construction: New classifies a cause that
// already matches another class by declassifying it first (its message
// and its other causes stay, its class goes), and the package sentinels
// that refine a class (Sentinel) are only ever wrapped by errors of their
// own class.
package errs

import (
	"errors"
	"reflect"
	"strings"

	"github.com/kshare-go/kshare"
)

// Classes are the error classes of package kshare, in the order their
// names are tested.
var Classes = []error{
	kshare.ErrAbortable, kshare.ErrInDoubt, kshare.ErrCommitted, kshare.ErrFatal,
	kshare.ErrUnsupported, kshare.ErrUsage, kshare.ErrClosed,
}

func isClass(err error) bool {
	for _, c := range Classes {
		if err == c {
			return true
		}
	}
	return false
}

// ClassOf returns the class err matches, or nil. For an error that
// breaks the vocabulary by matching two, it returns the first of Classes.
func ClassOf(err error) error {
	for _, c := range Classes {
		if errors.Is(err, c) {
			return c
		}
	}
	return nil
}

// ClassesOf returns every class err matches, for tests that check that
// there is exactly one.
func ClassesOf(err error) []error {
	var out []error
	for _, c := range Classes {
		if errors.Is(err, c) {
			out = append(out, c)
		}
	}
	return out
}

// Error is a classified error: the operation that failed, its class and
// its cause.
type Error struct {
	Op    string // what failed, e.g. "commit transaction"
	Err   error  // the cause; nil for none
	class error
}

// Error reads "kshare: <op>: <class>: <cause>".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("kshare: ")
	b.WriteString(e.Op)
	b.WriteString(": ")
	b.WriteString(e.class.Error())
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the class and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.class}
	}
	return []error{e.class, e.Err}
}

// New returns cause classified as class, for operation op. A cause that
// matches another class keeps its message and its other causes but not
// that class.
func New(class error, op string, cause error) error {
	if !isClass(class) {
		panic("errs.New: " + class.Error() + " is not a kshare error class")
	}
	for _, c := range ClassesOf(cause) {
		if c != class {
			cause = declassify(cause)
			break
		}
	}
	return &Error{Op: op, Err: cause, class: class}
}

// Abortable is New(kshare.ErrAbortable, op, cause).
func Abortable(op string, cause error) error { return New(kshare.ErrAbortable, op, cause) }

// InDoubt is New(kshare.ErrInDoubt, op, cause).
func InDoubt(op string, cause error) error { return New(kshare.ErrInDoubt, op, cause) }

// Committed is New(kshare.ErrCommitted, op, cause).
func Committed(op string, cause error) error { return New(kshare.ErrCommitted, op, cause) }

// Fatal is New(kshare.ErrFatal, op, cause).
func Fatal(op string, cause error) error { return New(kshare.ErrFatal, op, cause) }

// Unsupported is New(kshare.ErrUnsupported, op, cause).
func Unsupported(op string, cause error) error { return New(kshare.ErrUnsupported, op, cause) }

// Usage is New(kshare.ErrUsage, op, cause).
func Usage(op string, cause error) error { return New(kshare.ErrUsage, op, cause) }

// Closed is New(kshare.ErrClosed, op, cause).
func Closed(op string, cause error) error { return New(kshare.ErrClosed, op, cause) }

// Cause returns the cause of a classified *Error, or err itself: for an
// error that is put in another one's message without its class.
func Cause(err error) error {
	if e, ok := err.(*Error); ok && e.Err != nil {
		return e.Err
	}
	return err
}

// Is reports whether err is classified at all.
func Is(err error) bool { return ClassOf(err) != nil }

// sentinel is a package sentinel that refines a class: errors.Is finds
// both the sentinel and its class.
type sentinel struct {
	text  string
	class error
}

// Error returns the sentinel's text.
func (s *sentinel) Error() string { return s.text }

// Unwrap returns the class, so that errors.Is finds it.
func (s *sentinel) Unwrap() error { return s.class }

// Sentinel returns a new sentinel error with text that matches class.
func Sentinel(class error, text string) error {
	if !isClass(class) {
		panic("errs.Sentinel: " + class.Error() + " is not a kshare error class")
	}
	return &sentinel{text: text, class: class}
}

// declassify returns err without the classes it matches: the same
// message, and the same answers to errors.Is and errors.As for every
// cause except the class sentinels.
func declassify(err error) error {
	if err == nil || isClass(err) {
		return nil
	}
	if ClassOf(err) == nil {
		return err
	}
	if e, ok := err.(*Error); ok && e.Err == nil {
		return errors.New(e.Error())
	}
	d := &declassified{orig: err}
	switch e := err.(type) {
	case *Error:
		d.kids = appendKid(d.kids, e.Err)
	case *sentinel:
		// A sentinel's only child is its class.
	case interface{ Unwrap() error }:
		d.kids = appendKid(d.kids, e.Unwrap())
	case interface{ Unwrap() []error }:
		for _, k := range e.Unwrap() {
			d.kids = appendKid(d.kids, k)
		}
	}
	return d
}

func appendKid(kids []error, err error) []error {
	if k := declassify(err); k != nil {
		kids = append(kids, k)
	}
	return kids
}

// declassified stands for orig in an error tree without orig's classes.
type declassified struct {
	orig error
	kids []error
}

// Error is orig's message.
func (d *declassified) Error() string { return d.orig.Error() }

// Unwrap returns orig's causes, declassified.
func (d *declassified) Unwrap() []error { return d.kids }

// Is reports whether target is orig itself (a sentinel, say), or what
// orig's own Is method says, classes excepted.
func (d *declassified) Is(target error) bool {
	if isClass(target) {
		return false
	}
	if d.orig == target {
		return true
	}
	if x, ok := d.orig.(interface{ Is(error) bool }); ok {
		return x.Is(target)
	}
	return false
}

// As lets errors.As find orig by its type (an *AckError, say), except the
// classified types of this package.
func (d *declassified) As(target any) bool {
	switch d.orig.(type) {
	case *Error, *sentinel:
		return false
	}
	tv := reflect.ValueOf(target)
	if tv.Kind() != reflect.Pointer || tv.IsNil() {
		return false
	}
	if reflect.TypeOf(d.orig).AssignableTo(tv.Elem().Type()) {
		tv.Elem().Set(reflect.ValueOf(d.orig))
		return true
	}
	if x, ok := d.orig.(interface{ As(any) bool }); ok {
		return x.As(target)
	}
	return false
}
