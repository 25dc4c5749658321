package whatsapp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		code   int
		want   Class
	}{
		// Throttled: the number, app or account is over its rate.
		{"130429 throughput", 429, 130429, Throttled},
		{"4 app rate limit", 400, 4, Throttled},
		{"80007 WABA rate limit", 400, 80007, Throttled},
		{"131048 spam rate limit", 400, 131048, Throttled},
		{"429 without code", 429, NoCode, Throttled},
		{"429 with unknown code", 429, 999999, Throttled},

		// PairRate: this conversation only.
		{"131056 pair rate", 400, 131056, PairRate},
		{"131056 pair rate as 429", 429, 131056, PairRate},

		// Ambiguous: may have gone out.
		{"131000 something went wrong", 500, 131000, Ambiguous},
		{"131000 as 400", 400, 131000, Ambiguous},
		{"131016 service unavailable", 503, 131016, Ambiguous},
		{"1 API unknown", 400, 1, Ambiguous},
		{"2 API service", 503, 2, Ambiguous},
		{"500 without code", 500, NoCode, Ambiguous},
		{"502 without code", 502, NoCode, Ambiguous},
		{"504 with unknown code", 504, 123, Ambiguous},
		{"408 request timeout", 408, NoCode, Ambiguous},
		{"2xx carrying an error", 200, NoCode, Ambiguous},

		// Permanent: dead letter.
		{"131026 undeliverable", 400, 131026, Permanent},
		{"131047 re-engagement", 400, 131047, Permanent},
		{"100 invalid parameter", 400, 100, Permanent},
		{"131008 missing parameter", 400, 131008, Permanent},
		{"131009 invalid parameter value", 400, 131009, Permanent},
		{"131051 unsupported type", 400, 131051, Permanent},
		{"131049 ecosystem engagement", 400, 131049, Permanent},
		{"132000 template param count", 400, 132000, Permanent},
		{"132001 template missing", 404, 132001, Permanent},
		{"132015 template paused", 400, 132015, Permanent},
		{"132999 template range end", 400, 132999, Permanent},
		{"unknown code on 400", 400, 555555, Permanent},
		{"400 without code", 400, NoCode, Permanent},
		{"404 without code", 404, NoCode, Permanent},
		{"413 without code", 413, NoCode, Permanent},

		// Paused: stop the tenant.
		{"190 expired token", 401, 190, Paused},
		{"0 auth exception", 401, 0, Paused},
		{"3 capability", 403, 3, Paused},
		{"10 permission denied", 403, 10, Paused},
		{"200 permission", 403, 200, Paused},
		{"250 permission", 403, 250, Paused},
		{"299 permission", 403, 299, Paused},
		{"368 policy block", 403, 368, Paused},
		{"131031 account locked", 403, 131031, Paused},
		{"131042 payment issue", 400, 131042, Paused},
		{"133010 number not registered", 400, 133010, Paused},

		// Codes win over the status, but only known ones.
		{"190 behind a 500", 500, 190, Paused},
		{"unknown 401", 401, NoCode, Permanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Classify(tt.status, tt.code); got != tt.want {
				t.Errorf("Classify(%d, %d) = %s, want %s", tt.status, tt.code, got, tt.want)
			}
		})
	}
}

func TestPredicates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		class                   Class
		retryable, safe, paused bool
	}{
		{Retry, true, true, false},
		{Throttled, true, true, false},
		{PairRate, true, true, false},
		{Ambiguous, true, false, false},
		{Permanent, false, false, false},
		{Paused, false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.class.String(), func(t *testing.T) {
			t.Parallel()
			err := fmt.Errorf("send reply 2: %w", &SendError{Class: tt.class, Code: NoCode})
			if got, ok := ClassOf(err); !ok || got != tt.class {
				t.Errorf("ClassOf = %s, %v", got, ok)
			}
			if IsRetryable(err) != tt.retryable {
				t.Errorf("IsRetryable = %v", !tt.retryable)
			}
			if SafeToRetry(err) != tt.safe {
				t.Errorf("SafeToRetry = %v", !tt.safe)
			}
			if IsPaused(err) != tt.paused {
				t.Errorf("IsPaused = %v", !tt.paused)
			}
		})
	}

	plain := errors.New("not a send error")
	if _, ok := ClassOf(plain); ok || IsRetryable(plain) || SafeToRetry(plain) || IsPaused(plain) {
		t.Error("a foreign error must not be classified")
	}
	if IsRetryable(nil) {
		t.Error("nil is not retryable")
	}
}

func TestSendErrorText(t *testing.T) {
	t.Parallel()
	err := &SendError{Class: PairRate, HTTPStatus: 400, Code: 131056, Subcode: 2494055,
		Message: "(#131056) pair rate limit hit", RetryAfter: 4 * time.Second}
	want := "whatsapp send: pair_rate: http 400: code 131056 subcode 2494055: (#131056) pair rate limit hit (retry after 4s)"
	if err.Error() != want {
		t.Errorf("got  %s\nwant %s", err.Error(), want)
	}
	wrapped := &SendError{Class: Retry, Code: NoCode, Err: fmt.Errorf("post message: %w", context.Canceled)}
	if !errors.Is(wrapped, context.Canceled) {
		t.Error("SendError must unwrap to its cause")
	}
	if wrapped.Error() != "whatsapp send: retry: post message: context canceled" {
		t.Errorf("unexpected text %q", wrapped.Error())
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		header string
		want   time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"-5", 0},
		{"7", 7 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"99999999999999", 365 * 24 * time.Hour},
	}
	for _, tt := range tests {
		if got := parseRetryAfter(tt.header, now); got != tt.want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", tt.header, got, tt.want)
		}
	}
}

// What a failed send says of the Cloud API itself: only a refused
// connection, a server error (5xx, Meta's service codes) or no answer can
// be an outage; an answer about the message or the account, or the
// caller's own cancellation, is not.
func TestReachOf(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		err  error
		want Reach
	}{
		"refused":            {&SendError{Class: Retry, Code: NoCode, Err: errors.New("connection refused")}, NotReached},
		"503":                {&SendError{Class: Ambiguous, HTTPStatus: 503, Code: NoCode}, ServerError},
		"500 131000":         {&SendError{Class: Ambiguous, HTTPStatus: 500, Code: 131000}, ServerError},
		"400 131016":         {&SendError{Class: Ambiguous, HTTPStatus: 400, Code: 131016}, ServerError},
		"200 code 2":         {&SendError{Class: Ambiguous, HTTPStatus: 200, Code: 2}, ServerError},
		"timeout":            {&SendError{Class: Ambiguous, Code: NoCode, Err: context.DeadlineExceeded}, NoAnswer},
		"cancelled":          {&SendError{Class: Ambiguous, Code: NoCode, Err: context.Canceled}, Reached},
		"cancelled unsent":   {&SendError{Class: Retry, Code: NoCode, Err: context.Canceled}, Reached},
		"2xx without an id":  {&SendError{Class: Ambiguous, HTTPStatus: 200, Code: NoCode}, Reached},
		"408":                {&SendError{Class: Ambiguous, HTTPStatus: 408, Code: NoCode}, Reached},
		"throttled 503":      {&SendError{Class: Throttled, HTTPStatus: 503, Code: 130429}, Reached},
		"paused 500":         {&SendError{Class: Paused, HTTPStatus: 500, Code: 190}, Reached},
		"permanent 131026":   {&SendError{Class: Permanent, HTTPStatus: 400, Code: 131026}, Reached},
		"not a send error":   {errors.New("boom"), Reached},
		"wrapped server err": {fmt.Errorf("send: %w", &SendError{Class: Ambiguous, HTTPStatus: 502, Code: NoCode}), ServerError},
	}
	for name, c := range cases {
		if got := ReachOf(c.err); got != c.want {
			t.Errorf("%s: %d, want %d", name, got, c.want)
		}
	}
}
