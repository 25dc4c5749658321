package whatsapp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Class says what the caller should do after a failed send. It is the only
// thing the engine needs to decide between retrying, slowing down,
// reconciling, dead-lettering and pausing a tenant.
type Class int

const (
	// Retry: transient and the message definitely did not go out (the
	// request was never fully written: DNS, dial, connection refused, TLS).
	// Safe to send again as is.
	Retry Class = iota + 1
	// Throttled: Meta refused the request for throughput or rate limits
	// (130429, 4, 80007, 131048, or HTTP 429 without a code). Not sent; retry
	// with backoff and slow the whole phone number down.
	Throttled
	// PairRate: 131056, too many messages to the same user in a short time.
	// Not sent; retry only this conversation after 4^X seconds (X = attempt
	// number, computed by the caller). Other conversations go on.
	PairRate
	// Ambiguous: the request reached Meta (or may have) and no definite
	// answer came back: 5xx, a timeout or dropped connection after the
	// request was written, 131000 "something went wrong", 131016 "service
	// unavailable". Retryable, but the message may already have been sent.
	Ambiguous
	// Permanent: the request is wrong or the user cannot receive it
	// (131026, 131047, 100, 131008, 131009, 132xxx templates, 131051, any
	// unlisted 4xx). Retrying the same request cannot succeed: dead letter.
	Permanent
	// Paused: the tenant's account or credential is unusable (190 expired
	// token, 0 auth, 10 and 200-299 permissions, 368 policy block, 131031
	// account locked, ...). Every send of the tenant would fail the same way:
	// stop sending for the tenant until an operator resumes it.
	Paused
)

// String names the class for logs and error histories.
func (c Class) String() string {
	switch c {
	case Retry:
		return "retry"
	case Throttled:
		return "throttled"
	case PairRate:
		return "pair_rate"
	case Ambiguous:
		return "ambiguous"
	case Permanent:
		return "permanent"
	case Paused:
		return "paused"
	default:
		return "class(" + strconv.Itoa(int(c)) + ")"
	}
}

// NoCode is the code to pass to Classify when the answer carried no
// parseable Graph API error code. It is not 0 because 0 is a real code
// (AuthException).
const NoCode = -1

// codeClasses maps Graph API / Cloud API error codes to classes. Meta
// recommends driving error handling from the code (and details), not from
// the HTTP status or the message text.
var codeClasses = map[int]Class{
	// Authorization and account state: nothing of this tenant can be sent.
	0:      Paused, // AuthException: token expired, invalidated or app blocked
	3:      Paused, // API method: capability or permissions issue
	10:     Paused, // permission denied or revoked
	190:    Paused, // access token expired
	368:    Paused, // temporarily blocked for policy violations
	131031: Paused, // business account locked
	131042: Paused, // business eligibility payment issue
	133010: Paused, // phone number not registered on the Cloud API

	// Rate limits for the whole number, app or account.
	4:      Throttled, // application request limit reached
	80007:  Throttled, // WhatsApp Business Account rate limit
	130429: Throttled, // Cloud API throughput reached
	131048: Throttled, // spam rate limit hit

	// Rate limit for one business-user pair.
	131056: PairRate,

	// Meta failed in a way that does not say whether the message went out.
	1:      Ambiguous, // API unknown: possibly a server error
	2:      Ambiguous, // API service: temporary downtime
	131000: Ambiguous, // something went wrong
	131016: Ambiguous, // service unavailable

	// The request or the recipient is the problem.
	100:    Permanent, // invalid parameter
	131008: Permanent, // required parameter missing
	131009: Permanent, // parameter value invalid
	131026: Permanent, // message undeliverable
	131047: Permanent, // re-engagement: more than 24 h since the user's last message
	131049: Permanent, // not delivered to maintain healthy ecosystem engagement
	131051: Permanent, // unsupported message type
}

// codeRanges covers the families of codes Meta documents as ranges.
var codeRanges = []struct {
	lo, hi int
	class  Class
}{
	{200, 299, Paused},          // API permission errors
	{132000, 132999, Permanent}, // template errors (missing, paused, params...)
}

// Classify maps an HTTP status and a Graph API error code (NoCode when there
// was none) to a Class. This is the one place where that mapping lives.
//
// A known code wins over the HTTP status. Without a known code: 429 is
// Throttled, 408 and 5xx are Ambiguous, any other 4xx is Permanent, and
// anything else (a 2xx or 3xx carrying an error) is Ambiguous.
func Classify(httpStatus int, code int) Class {
	if code != NoCode {
		if c, ok := codeClasses[code]; ok {
			return c
		}
		for _, r := range codeRanges {
			if code >= r.lo && code <= r.hi {
				return r.class
			}
		}
	}
	switch {
	case httpStatus == http.StatusTooManyRequests:
		return Throttled
	case httpStatus == http.StatusRequestTimeout:
		// The far end gave up waiting: it may or may not have acted.
		return Ambiguous
	case httpStatus >= 500:
		return Ambiguous
	case httpStatus >= 400:
		return Permanent
	default:
		return Ambiguous
	}
}

// SendError is the error of a failed Send. Its Error text may carry Meta's
// code, subcode and message, never the access token.
type SendError struct {
	// Class says what to do next.
	Class Class
	// HTTPStatus is the status Meta answered, 0 when no answer arrived.
	HTTPStatus int
	// Code is Meta's error.code, NoCode when absent.
	Code int
	// Subcode is Meta's error.error_subcode, 0 when absent.
	Subcode int
	// Message is Meta's error.message (plus error_data.details when given),
	// or what went wrong locally.
	Message string
	// FBTraceID is Meta's error.fbtrace_id, for support requests.
	FBTraceID string
	// RetryAfter is the Retry-After hint of the answer, 0 when none.
	RetryAfter time.Duration
	// Err is the underlying transport or context error, if any.
	Err error
}

// Error describes the failure with its class first, for error histories.
func (e *SendError) Error() string {
	var b strings.Builder
	b.WriteString("whatsapp send: ")
	b.WriteString(e.Class.String())
	if e.HTTPStatus != 0 {
		fmt.Fprintf(&b, ": http %d", e.HTTPStatus)
	}
	if e.Code != NoCode {
		fmt.Fprintf(&b, ": code %d", e.Code)
		if e.Subcode != 0 {
			fmt.Fprintf(&b, " subcode %d", e.Subcode)
		}
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	return b.String()
}

// Unwrap gives errors.Is access to the transport or context error, so that
// errors.Is(err, context.Canceled) works.
func (e *SendError) Unwrap() error { return e.Err }

// ClassOf returns the class of a send error, and false when err is not (and
// does not wrap) a *SendError.
func ClassOf(err error) (Class, bool) {
	var se *SendError
	if errors.As(err, &se) {
		return se.Class, true
	}
	return 0, false
}

// IsRetryable reports whether sending again may succeed: Retry, Throttled,
// PairRate and Ambiguous. For Ambiguous the first attempt may have been
// delivered; see SafeToRetry.
func IsRetryable(err error) bool {
	c, ok := ClassOf(err)
	return ok && (c == Retry || c == Throttled || c == PairRate || c == Ambiguous)
}

// SafeToRetry reports whether the failed send certainly did not go out, so
// sending again cannot produce a duplicate: Retry, Throttled and PairRate.
func SafeToRetry(err error) bool {
	c, ok := ClassOf(err)
	return ok && (c == Retry || c == Throttled || c == PairRate)
}

// IsPaused reports whether the tenant's sending must stop until an operator
// resumes it.
func IsPaused(err error) bool {
	c, ok := ClassOf(err)
	return ok && c == Paused
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date.
// Absent, malformed or past values give 0.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		// Cap absurd values instead of overflowing.
		const maxSecs = int64(365 * 24 * time.Hour / time.Second)
		return time.Duration(min(secs, maxSecs)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// Reach says what a failed send tells of the Cloud API itself, apart from
// the message: whether it was there to serve the number.
type Reach int

const (
	// Reached: the Cloud API answered about the message, the recipient or
	// the account (any 4xx, a throttle, a pause), or the caller gave up
	// (a cancelled context says nothing of Meta).
	Reached Reach = iota
	// NotReached: the request never reached Meta (connection refused, DNS,
	// TLS): the message certainly did not go out.
	NotReached
	// ServerError: Meta, or its front end, answered with a server error —
	// a 5xx, or a code that means its service is away (1 "API unknown",
	// 2 "API service: temporary downtime", 131000 "something went wrong",
	// 131016 "service unavailable"). Ambiguous as a send, as Classify says.
	ServerError
	// NoAnswer: the request went out and no answer came (a timeout, a
	// dropped connection): the message may have gone out.
	NoAnswer
)

// unavailableCodes are Meta's codes that say its service, not the
// message, failed.
var unavailableCodes = map[int]bool{1: true, 2: true, 131000: true, 131016: true}

// ReachOf says what err, a failed send, tells of the Cloud API's
// reachability. Only Retry and Ambiguous failures can be outages: a
// throttle, a pause or a permanent error is an answer about something else.
func ReachOf(err error) Reach {
	var se *SendError
	if !errors.As(err, &se) || errors.Is(err, context.Canceled) {
		return Reached
	}
	switch {
	case se.Class == Retry && se.HTTPStatus == 0:
		return NotReached
	case se.Class != Ambiguous:
		return Reached
	case se.HTTPStatus >= 500 || unavailableCodes[se.Code]:
		return ServerError
	case se.HTTPStatus == 0:
		return NoAnswer
	}
	return Reached
}
