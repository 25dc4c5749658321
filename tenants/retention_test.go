package tenants_test

import (
	"testing"
	"time"

	"github.com/ordo-dev/ordo/tenants"
)

func TestParseRetention(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration
		show string
		bad  bool
	}{
		{in: "30d", want: 30 * 24 * time.Hour, show: "30d"},
		{in: "0", want: 0, show: "0"},
		{in: "12h", want: 12 * time.Hour, show: "12h0m0s"},
		{in: "48h", want: 48 * time.Hour, show: "2d"},
		{in: "-1d", bad: true},
		{in: "thirty", bad: true},
		{in: "", bad: true},
	} {
		got, err := tenants.ParseRetention(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseRetention(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || time.Duration(got) != tc.want || got.String() != tc.show {
			t.Errorf("ParseRetention(%q) = %v (%s), %v; want %v shown %q", tc.in, time.Duration(got), got, err, tc.want, tc.show)
		}
	}
}
