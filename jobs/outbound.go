package jobs

import (
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/ordo-dev/ordo/tenants"
)

// outboundTransport is the transport of calls to tenants' handler and
// events URLs: every connection is checked against the outbound address
// policy at the address actually dialled, after DNS (tenants.OutboundPolicy
// .DialControl), so a name that resolves, or re-resolves, to a refused
// address (DNS rebinding) is refused too. Up to conns idle connections to a
// host stay open (many tenants' handlers are one n8n's workflows).
func outboundTransport(policy tenants.OutboundPolicy, conns int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil // a proxy would dial for us, unchecked
	t.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: policy.DialControl}).DialContext
	t.MaxIdleConnsPerHost = conns
	t.MaxIdleConns = max(t.MaxIdleConns, conns)
	return t
}

// outboundCause is the policy's reason in a refused call's error: the
// address and why, without the URL (which may carry a secret).
func outboundCause(err error) string {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if _, ok := e.(*net.OpError); ok {
			if inner := errors.Unwrap(e); inner != nil {
				return inner.Error()
			}
		}
	}
	return tenants.ErrOutboundRefused.Error()
}
