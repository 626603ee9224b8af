package wire

import "context"

// codedError is a sentinel error of an engine that says which wire code
// answers it (NewCodedError).
type codedError struct{ code, msg string }

func (e *codedError) Error() string    { return e.msg }
func (e *codedError) WireCode() string { return e.code }

// NewCodedError returns a new sentinel error with message msg that requests
// failing with it (wrapped or not) are answered with code: the engines
// declare their errors' codes where they declare the errors, and CodeOf
// reads them, for NATS replies and the HTTP API alike.
func NewCodedError(code, msg string) error { return &codedError{code: code, msg: msg} }

// CodeOf is the wire code of err: 400 if any error in its chain is coded
// 400, else 404, else 503 (an ended context counts as 503), else 500.
func CodeOf(err error) string {
	var bad, missing, unavailable bool
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if c, ok := e.(interface{ WireCode() string }); ok {
			switch c.WireCode() {
			case CodeBadRequest:
				bad = true
			case CodeNotFound:
				missing = true
			case CodeUnavailable:
				unavailable = true
			}
		}
		unavailable = unavailable || e == context.DeadlineExceeded || e == context.Canceled
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		}
	}
	walk(err)
	switch {
	case bad:
		return CodeBadRequest
	case missing:
		return CodeNotFound
	case unavailable:
		return CodeUnavailable
	}
	return CodeInternal
}

// Code is one error code of the protocol and what a client does with it.
type Code struct {
	Code string
	// Retryable: the refusal is about this node or this moment (no ids
	// ready, store down, stopping, clock behind, a key another node may
	// hold, a tag below the ids already issued until an operator restarts
	// it), so asking again, here or on another node of the queue group,
	// may succeed. Otherwise the same request gets the same answer.
	Retryable bool
}

// Codes are every code a node answers with: the one list of which are
// retryable. The Go client retries exactly these (plus timeouts and "no
// responders"), and the README's table of codes says the same (a test of
// package client checks both).
var Codes = []Code{
	{Code: CodeBadRequest},
	{Code: CodeNotFound},
	{Code: CodeUnavailable, Retryable: true},
	{Code: CodeInternal},
}

// Retryable reports whether a request refused with code may succeed when
// asked again (Codes).
func Retryable(code string) bool {
	for _, c := range Codes {
		if c.Code == code {
			return c.Retryable
		}
	}
	return false
}
