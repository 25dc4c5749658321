package web

import "testing"

func TestBearer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		header, key string
		ok          bool
	}{
		{"Bearer ordo_abc_def", "ordo_abc_def", true},
		{"bearer ordo_abc_def", "ordo_abc_def", true}, // the scheme is case-insensitive (RFC 7235)
		{"BEARER  ordo_abc_def ", "ordo_abc_def", true},
		{"Bearer ", "", false},
		{"Bearer", "", false},
		{"Basic dXNlcjpwdw==", "", false},
		{"ordo_abc_def", "", false},
		{"", "", false},
	} {
		key, ok := bearer(c.header)
		if key != c.key || ok != c.ok {
			t.Errorf("bearer(%q) = %q, %t; want %q, %t", c.header, key, ok, c.key, c.ok)
		}
	}
}
