package tenants

// The outbound address policy: where a tenant's handler_url and events_url
// may point. ordo calls those URLs from inside the operator's network, and
// reports what it got back (dead letters name the answer), so a URL of the
// tenant's choosing could read the cloud's metadata service (credentials
// included) or scan the network (issue 24: "connection refused", "EOF",
// "handler answered 405" read back from the dead letters).
//
// Refused: link-local addresses (169.254.0.0/16, fe80::/10: the metadata
// services live there), unspecified ones (0.0.0.0/8, ::), multicast and
// broadcast, the metadata services' other addresses (fd00:ec2::254,
// Alibaba's 100.100.100.200) and names (metadata.google.internal,
// metadata, instance-data, …), and IPv4 written any way but a dotted quad
// (2130706433, 0177.0.0.1, 0x7f.1: resolvers disagree on what they are).
// An IPv4 address inside IPv6 (::ffff:a.b.c.d, 64:ff9b::a.b.c.d) is judged
// as the IPv4 address. Loopback and private addresses are allowed: a
// self-hosted n8n usually sits on the same host or private network.
//
// The operator adds to it (OutboundPolicy.Deny: e.g. the database's
// network) and makes exceptions (OutboundPolicy.Allow wins over every
// refusal); `ordo serve` and `ordo dev` read them from ORDO_OUTBOUND_DENY
// and ORDO_OUTBOUND_ALLOW, comma-separated CIDRs.
//
// It is checked twice: when a URL is set (CheckURL: the CLI, the admin page,
// any API, through Store.Create and Store.Update), and when it is dialled
// (DialControl: the address actually connected to, after DNS, so a name
// that resolves, or later re-resolves, to a refused address is refused
// too). Redirects are never followed (jobs).

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
)

// OutboundPolicy is the operator's part of the policy; the zero value is
// the built-in policy alone.
type OutboundPolicy struct {
	// Deny refuses these networks as well. Default none.
	Deny []netip.Prefix
	// Allow permits these networks whatever else refuses them. Default none.
	Allow []netip.Prefix
}

// ErrOutboundRefused is what a refused address or name wraps.
var ErrOutboundRefused = errors.New("address not allowed for outbound calls")

// builtinDenied are refused besides the classes netip names.
var builtinDenied = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("100.100.100.200/32"), "a cloud metadata service"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "a cloud metadata service"},
}

// metadataNames are the cloud metadata services' host names.
var metadataNames = map[string]bool{
	"metadata": true, "metadata.google.internal": true, "metadata.goog": true,
	"instance-data": true, "instance-data.ec2.internal": true, "metadata.azure.internal": true,
	"metadata.packet.net": true, "metadata.platformequinix.com": true,
}

// nat64 is the well-known prefix that carries an IPv4 address in IPv6.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// CheckAddr returns nil when a may be called, or an error wrapping
// ErrOutboundRefused that says why not.
func (p OutboundPolicy) CheckAddr(a netip.Addr) error {
	a, why := p.refusal(a)
	if why == "" {
		return nil
	}
	return fmt.Errorf("%s (%s): %w", a, why, ErrOutboundRefused)
}

// refusal is why the policy refuses a (as judged: unmapped, unzoned), or
// "" when it allows it.
func (p OutboundPolicy) refusal(a netip.Addr) (netip.Addr, string) {
	a = a.WithZone("").Unmap()
	if nat64.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte(b[12:]))
	}
	for _, n := range p.Allow {
		if n.Contains(a) {
			return a, ""
		}
	}
	switch {
	case a.IsLinkLocalUnicast():
		return a, "link-local"
	case a.IsUnspecified():
		return a, "unspecified"
	case a.IsMulticast():
		return a, "multicast"
	}
	for _, d := range builtinDenied {
		if d.prefix.Contains(a) {
			return a, d.why
		}
	}
	for _, n := range p.Deny {
		if n.Contains(a) {
			return a, "denied by the operator's ORDO_OUTBOUND_DENY"
		}
	}
	return a, ""
}

// CheckURL checks a URL's host when it is set: a literal address by
// CheckAddr, a metadata service's name, an IPv4 address in another spelling
// than a dotted quad. Names are not resolved here (DialControl checks what
// they resolve to, every time).
func (p OutboundPolicy) CheckURL(field, s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return invalid(field, "must be an absolute http or https URL")
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if metadataNames[host] {
		return invalid(field, "must not name a cloud metadata service (%s)", host)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a, why := p.refusal(a); why != "" {
			return invalid(field, "must not point at %s (%s): link-local, unspecified, multicast and cloud metadata addresses are refused", a, why)
		}
		return nil
	}
	if oddIPv4(host) {
		return invalid(field, "host %q reads as an IPv4 address in another spelling: write it as a dotted quad (a.b.c.d)", host)
	}
	return nil
}

// oddIPv4 reports whether host is made only of numbers (decimal, octal,
// hex), dot-separated, as inet_aton reads them, without being a plain
// dotted quad (which netip.ParseAddr takes).
func oddIPv4(host string) bool {
	parts := strings.Split(host, ".")
	if len(parts) > 4 {
		return false
	}
	for _, part := range parts {
		digits := part
		hex := strings.HasPrefix(part, "0x")
		if hex {
			digits = part[2:]
		}
		if digits == "" && !hex {
			return false
		}
		for _, c := range digits {
			if !('0' <= c && c <= '9' || hex && 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// DialControl is a net.Dialer's Control: it refuses a connection to an
// address the policy refuses, after name resolution, right before the
// connect.
func (p OutboundPolicy) DialControl(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("outbound address %q: %w", address, ErrOutboundRefused)
	}
	return p.CheckAddr(ap.Addr())
}

// ParseOutboundList reads comma-separated CIDRs (a bare address is its
// own /32 or /128), for ORDO_OUTBOUND_DENY and ORDO_OUTBOUND_ALLOW.
func ParseOutboundList(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if a, err := netip.ParseAddr(f); err == nil {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		pr, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR (e.g. 10.0.0.0/8) or an address", f)
		}
		out = append(out, pr.Masked())
	}
	return out, nil
}
