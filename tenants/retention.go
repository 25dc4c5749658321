package tenants

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// RetentionDefault is how long a new tenant's finished messages keep their
// content (the column default in sql/migrations/000003_retention.up.sql).
const RetentionDefault = 30 * 24 * time.Hour

// RetentionMin is the shortest retention other than 0: an hour leaves time
// for status webhooks and for reading what just happened.
const RetentionMin = time.Hour

// Retention is how long a tenant's finished messages keep their content; 0
// keeps it for ever. It is written and shown as days ("30d") when whole,
// else as a Go duration ("36h0m0s").
type Retention time.Duration

// ParseRetention reads "30d", "0", or a Go duration such as "12h".
func ParseRetention(s string) (Retention, error) {
	if s == "0" {
		return 0, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 {
			return 0, invalid("retention", "must be a number of days (30d), a duration (12h) or 0")
		}
		return Retention(time.Duration(n) * 24 * time.Hour), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, invalid("retention", "must be a number of days (30d), a duration (12h) or 0")
	}
	return Retention(d), nil
}

// String is "0", "30d" or a Go duration.
func (r Retention) String() string {
	d := time.Duration(r)
	switch {
	case d == 0:
		return "0"
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

// MarshalText shows a retention as String does.
func (r Retention) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads what ParseRetention reads.
func (r *Retention) UnmarshalText(b []byte) error {
	v, err := ParseRetention(string(b))
	*r = v
	return err
}

// seconds is r for a bigint query parameter; nil stays nil.
func (r *Retention) seconds() *int64 {
	if r == nil {
		return nil
	}
	s := int64(time.Duration(*r) / time.Second)
	return &s
}
