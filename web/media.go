package web

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/tenants"
)

// getMedia streams an inbound message's media (GET /v1/media/{media_id}):
// an id seen in this tenant's inbound messages (404 otherwise, another
// tenant's included), resolved and downloaded with the tenant's own
// WhatsApp token, so a workflow never holds the token. The bytes stream
// from Meta to the caller (never buffered whole), at most
// whatsapp.MaxMediaBytes, with Meta's Content-Type.
func (s *Server) getMedia(w http.ResponseWriter, r *http.Request) {
	id := pathVar(r, "media_id")
	if err := checkID("media_id", id); err != nil {
		s.writeError(w, r, err)
		return
	}
	t := tenantOf(r)
	if _, err := s.engine.MediaSeen(r.Context(), t.ID, id); err != nil {
		s.writeError(w, r, err)
		return
	}
	cred, err := s.whatsappCredential(r, t)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	m, err := s.wa.Media(r.Context(), cred, id)
	switch {
	case errors.Is(err, whatsapp.ErrMediaNotFound):
		s.writeError(w, r, engine.Errorf(engine.CodeNotFound, "media_id: WhatsApp no longer has this media (inbound media is kept 30 days)"))
		return
	case err != nil:
		s.logger.WarnContext(r.Context(), "media download failed", slog.String("tenant", t.Slug), slog.String("error", err.Error()))
		s.writeError(w, r, engine.Errorf(engine.CodeUnavailable, "WhatsApp did not serve the media; retry later"))
		return
	}
	defer m.Body.Close()
	// A large file on a slow link outlasts the server's WriteTimeout.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.MediaTimeout))
	h := w.Header()
	h.Set("Content-Type", m.ContentType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "private, no-store")
	if m.Length >= 0 {
		h.Set("Content-Length", strconv.FormatInt(m.Length, 10))
	}
	w.WriteHeader(http.StatusOK)
	n, err := io.Copy(w, io.LimitReader(m.Body, whatsapp.MaxMediaBytes+1))
	if err != nil || n > whatsapp.MaxMediaBytes {
		// The status is out: cut the connection so the client sees a
		// truncated download, not a complete one.
		panic(http.ErrAbortHandler)
	}
}

// whatsappCredential reads tenant t's WhatsApp credential for a call to
// Meta on its behalf.
func (s *Server) whatsappCredential(r *http.Request, t tenants.Tenant) (whatsapp.Credential, error) {
	var cred whatsapp.Credential
	raw, err := s.vault.Get(r.Context(), t.ID, "whatsapp")
	switch {
	case errors.Is(err, tenants.ErrNotFound):
		return cred, engine.Errorf(engine.CodeNotFound, "media_id: the tenant has no whatsapp credential to fetch it with")
	case errors.Is(err, tenants.ErrUnreadable):
		return cred, engine.Errorf(engine.CodeUnavailable, "the tenant's whatsapp credential cannot be decrypted")
	case err != nil:
		return cred, err
	}
	if err := json.Unmarshal(raw, &cred); err != nil || cred.AccessToken == "" {
		return cred, engine.Errorf(engine.CodeUnavailable, "the tenant's whatsapp credential has no access_token")
	}
	return cred, nil
}

// getUsage answers what Meta billed the tenant for (GET /v1/usage): by
// pricing category, the messages whose first priced status is stamped in
// [since, until) — RFC 3339 times; by default the current calendar month
// (UTC), which includes now.
func (s *Server) getUsage(w http.ResponseWriter, r *http.Request) {
	since, until := engine.MonthOf(time.Now())
	q := r.URL.Query()
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &since}, {"until", &until}} {
		if !q.Has(p.name) {
			continue
		}
		v, err := time.Parse(time.RFC3339, q.Get(p.name))
		if err != nil {
			s.writeError(w, r, engine.Errorf(engine.CodeInvalid, "%s: must be an RFC 3339 time such as 2026-11-01T00:00:00Z", p.name))
			return
		}
		*p.dst = v
	}
	if !since.Before(until) {
		s.writeError(w, r, engine.Errorf(engine.CodeInvalid, "since: must be before until"))
		return
	}
	u, err := s.engine.Usage(r.Context(), tenantOf(r).ID, since, until)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, u)
}
