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
