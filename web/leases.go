package web

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/ordo-dev/ordo/engine"
)

// LeaseBodyMaxBytes limits a lease request's body ({"ttl_ms"}, {"token"}):
// read only after the API key is known, like every body.
const LeaseBodyMaxBytes = 4 << 10

// leaseBody is what the lease endpoints read; unknown fields are refused,
// so a typo ("ttl") is a 400 rather than a silent default.
type leaseBody struct {
	TTLMS *json.Number `json:"ttl_ms"`
	Token *json.Number `json:"token"`
}

// readLeaseBody reads an optional JSON body (none, or {} and its fields).
func readLeaseBody(w http.ResponseWriter, r *http.Request) (leaseBody, error) {
	var b leaseBody
	if r.ContentLength == 0 && r.Header.Get("Content-Type") == "" {
		return b, nil
	}
	body, err := readJSONBody(w, r, LeaseBodyMaxBytes)
	if err != nil || len(bytes.TrimSpace(body)) == 0 {
		return b, err
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	d.UseNumber()
	if err := d.Decode(&b); err != nil || d.More() {
		return b, engine.Errorf(engine.CodeInvalid, "body: must be a JSON object with ttl_ms and/or token")
	}
	// json.Number also takes a quoted number; these are JSON numbers.
	for name, n := range map[string]*json.Number{"ttl_ms": b.TTLMS, "token": b.Token} {
		if n != nil && !isJSONNumber(body, name) {
			return b, engine.Errorf(engine.CodeInvalid, "%s: must be a JSON number", name)
		}
	}
	return b, nil
}

// leaseKey is the path's key, checked like an id (1–256 printable
// characters, no surrounding spaces).
func leaseKey(r *http.Request) (string, error) {
	k := pathVar(r, "key")
	return k, checkID("key", k)
}

// leaseTTL checks ttl_ms: required, an integer within the bounds.
func leaseTTL(n *json.Number) (time.Duration, error) {
	bad := engine.Errorf(engine.CodeInvalid, "ttl_ms: required, an integer from %d to %d",
		engine.LeaseTTLMin.Milliseconds(), engine.LeaseTTLMax.Milliseconds())
	if n == nil {
		return 0, bad
	}
	ms, err := n.Int64()
	if err != nil || ms < engine.LeaseTTLMin.Milliseconds() || ms > engine.LeaseTTLMax.Milliseconds() {
		return 0, bad
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// leaseToken finds the token in the query (?token=) or the body; both
// given must agree.
func leaseToken(r *http.Request, fromBody *json.Number) (int64, error) {
	bad := engine.Errorf(engine.CodeInvalid, "token: required, the positive integer acquire returned")
	q, inQuery := r.URL.Query()["token"]
	var s string
	switch {
	case inQuery && len(q) != 1:
		return 0, bad
	case inQuery && fromBody != nil && q[0] != fromBody.String():
		return 0, engine.Errorf(engine.CodeInvalid, "token: the query's and the body's differ")
	case inQuery:
		s = q[0]
	case fromBody != nil:
		s = fromBody.String()
	default:
		return 0, bad
	}
	t, err := strconv.ParseInt(s, 10, 64)
	if err != nil || t <= 0 {
		return 0, bad
	}
	return t, nil
}

// acquireLease: POST /v1/leases/{key} {"ttl_ms"} → 200 the lease, 409 held.
func (s *Server) acquireLease(w http.ResponseWriter, r *http.Request) {
	key, err := leaseKey(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	b, err := readLeaseBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if b.Token != nil {
		s.writeError(w, r, engine.Errorf(engine.CodeInvalid, "token: not taken by acquire (renew it with POST /v1/leases/{key}/renew)"))
		return
	}
	ttl, err := leaseTTL(b.TTLMS)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	l, err := s.engine.AcquireLease(r.Context(), tenantOf(r).ID, key, ttl)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}

// renewLease: POST /v1/leases/{key}/renew {"token","ttl_ms"} → 200, or 409
// when the token no longer holds the lease.
func (s *Server) renewLease(w http.ResponseWriter, r *http.Request) {
	key, err := leaseKey(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	b, err := readLeaseBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	token, err := leaseToken(r, b.Token)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ttl, err := leaseTTL(b.TTLMS)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	l, err := s.engine.RenewLease(r.Context(), tenantOf(r).ID, key, token, ttl)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}

// releaseLease: DELETE /v1/leases/{key}?token= (or {"token"}) → 200, or
// 409 when a newer token was issued since.
func (s *Server) releaseLease(w http.ResponseWriter, r *http.Request) {
	key, err := leaseKey(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	b, err := readLeaseBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if b.TTLMS != nil {
		s.writeError(w, r, engine.Errorf(engine.CodeInvalid, "ttl_ms: not taken by release"))
		return
	}
	token, err := leaseToken(r, b.Token)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	l, err := s.engine.ReleaseLease(r.Context(), tenantOf(r).ID, key, token)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}

// checkLease: GET /v1/leases/{key}?token= → 200 {"valid": true|false}.
func (s *Server) checkLease(w http.ResponseWriter, r *http.Request) {
	key, err := leaseKey(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	token, err := leaseToken(r, nil)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	c, err := s.engine.CheckLease(r.Context(), tenantOf(r).ID, key, token)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// isJSONNumber reports whether field name of the JSON object body is a
// number (not a string holding one).
func isJSONNumber(body []byte, name string) bool {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return false
	}
	v := bytes.TrimSpace(fields[name])
	return len(v) > 0 && (v[0] == '-' || (v[0] >= '0' && v[0] <= '9'))
}
