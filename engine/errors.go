package engine

import (
	"errors"
	"fmt"
)

// Code classifies an error for the user; the web layer maps each code to one
// HTTP status in one place.
type Code string

// The error codes users see in {"error":{"code":…}}.
const (
	CodeInvalid      Code = "invalid_request"
	CodeUnauthorized Code = "unauthorized"
	CodeNotFound     Code = "not_found"
	CodeConflict     Code = "conflict"
	// CodeReused: a message_id offered again with another body.
	CodeReused      Code = "message_id_reused"
	CodeTooLarge    Code = "payload_too_large"
	CodeUnsupported Code = "unsupported_media_type"
	CodeRateLimited Code = "rate_limited"
	CodeUnavailable Code = "unavailable"
	CodeInternal    Code = "internal"
)

// DatabaseUnavailable is what a request that needed the database is told
// while Postgres cannot be reached (503, with Retry-After).
const DatabaseUnavailable = "the database is unavailable; nothing was stored, try again shortly"

// Error is ordo's one error type for things a user is told. Message is safe to
// show; Err, the cause, is for logs only.
type Error struct {
	Code    Code
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an *Error with a user-safe message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns err's code, CodeInternal for anything that is not an *Error.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrorMessage returns the user-safe message of err; internals never leak.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Code != CodeInternal {
		return e.Message
	}
	return "internal error"
}
