package tenants_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/ordo-dev/ordo/tenants"
)

// The outbound address policy's decisions, for a URL when it is set.
func TestOutboundPolicyCheckURL(t *testing.T) {
	t.Parallel()
	operator := tenants.OutboundPolicy{
		Deny:  []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")},
		Allow: []netip.Prefix{netip.MustParsePrefix("169.254.10.0/24")},
	}
	for _, tc := range []struct {
		url    string
		policy tenants.OutboundPolicy
		ok     bool
	}{
		{"http://127.0.0.1:5678/webhook/x", tenants.OutboundPolicy{}, true},
		{"http://localhost:5678/webhook/x", tenants.OutboundPolicy{}, true},
		{"http://[::1]:5678/", tenants.OutboundPolicy{}, true},
		{"http://10.1.2.3/", tenants.OutboundPolicy{}, true},
		{"http://192.168.1.20/", tenants.OutboundPolicy{}, true},
		{"https://n8n.example.com/webhook/x", tenants.OutboundPolicy{}, true},
		{"http://169.254.169.254/latest/meta-data/", tenants.OutboundPolicy{}, false},
		{"http://169.254.170.2/v2/credentials", tenants.OutboundPolicy{}, false},
		{"http://[fe80::1]/", tenants.OutboundPolicy{}, false},
		{"http://[fe80::1%25eth0]/", tenants.OutboundPolicy{}, false},
		{"http://[::ffff:169.254.169.254]/", tenants.OutboundPolicy{}, false},
		{"http://[64:ff9b::a9fe:a9fe]/", tenants.OutboundPolicy{}, false},
		{"http://[fd00:ec2::254]/", tenants.OutboundPolicy{}, false},
		{"http://100.100.100.200/", tenants.OutboundPolicy{}, false},
		{"http://0.0.0.0:5432/", tenants.OutboundPolicy{}, false},
		{"http://[::]/", tenants.OutboundPolicy{}, false},
		{"http://224.0.0.1/", tenants.OutboundPolicy{}, false},
		{"http://[ff02::1]/", tenants.OutboundPolicy{}, false},
		{"http://255.255.255.255/", tenants.OutboundPolicy{}, false},
		{"http://metadata.google.internal/computeMetadata/v1/", tenants.OutboundPolicy{}, false},
		{"http://METADATA.google.internal./", tenants.OutboundPolicy{}, false},
		{"http://metadata/", tenants.OutboundPolicy{}, false},
		{"http://instance-data/", tenants.OutboundPolicy{}, false},
		{"http://2130706433/", tenants.OutboundPolicy{}, false},
		{"http://0177.0.0.1/", tenants.OutboundPolicy{}, false},
		{"http://0x7f.1/", tenants.OutboundPolicy{}, false},
		{"http://127.1/", tenants.OutboundPolicy{}, false},
		{"http://0xA9FEA9FE/", tenants.OutboundPolicy{}, false},
		{"http://10.9.1.1/", operator, false},
		{"http://10.8.1.1/", operator, true},
		{"http://169.254.10.5/", operator, true},
		{"http://169.254.169.254/", operator, false},
	} {
		err := tc.policy.CheckURL("handler_url", tc.url)
		if (err == nil) != tc.ok {
			t.Errorf("CheckURL(%s) = %v, want ok %v", tc.url, err, tc.ok)
		}
		var inv *tenants.InvalidError
		if err != nil && !errors.As(err, &inv) {
			t.Errorf("CheckURL(%s): %T, want an *InvalidError (a 400 naming the field)", tc.url, err)
		}
	}
}

// At dial time the address is what counts, whatever the name was.
func TestOutboundPolicyDialControl(t *testing.T) {
	t.Parallel()
	p := tenants.OutboundPolicy{Deny: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	for addr, ok := range map[string]bool{
		"169.254.169.254:80": false, "[fe80::1]:80": false, "127.0.0.1:5678": false, "[::1]:5678": true, "10.0.0.1:80": true,
	} {
		err := p.DialControl("tcp", addr, nil)
		if (err == nil) != ok || (err != nil && !errors.Is(err, tenants.ErrOutboundRefused)) {
			t.Errorf("DialControl(%s) = %v, want ok %v", addr, err, ok)
		}
	}
}
