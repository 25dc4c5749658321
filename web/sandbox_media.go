package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"image"
	"image/color"
	"image/png"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// The sandbox's share of WhatsApp's own rules (issue 26): statuses with
// pricing after each send, and media ids that resolve, so `ordo dev`
// shows usage and GET /v1/media/{id} without Meta. Read receipts are
// recorded beside the sends (sandboxSend).

// sandboxStatusDelay lets the send's answer be recorded before its
// statuses arrive, as with Meta.
const sandboxStatusDelay = 100 * time.Millisecond

// sandboxStatuses plays Meta's "sent" and "delivered" status webhooks,
// with pricing, for a send the sandbox took; in the background, as Meta's
// come after the answer.
func (s *Server) sandboxStatuses(phoneNumberID, wamid string, fields map[string]any, body []byte) {
	cb, _ := fields["biz_opaque_callback_data"].(string)
	if cb == "" {
		return
	}
	go func() {
		time.Sleep(sandboxStatusDelay)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.engine.SandboxStatuses(ctx, phoneNumberID, wamid, cb, body); err != nil {
			s.logger.Warn("sandbox statuses not stored", slog.String("wamid", wamid), slog.String("error", err.Error()))
		}
	}()
}

// sandboxMedia answers like the Graph API's GET /{media_id}: where to
// download the file, which is a small generated image for any id.
func (s *Server) sandboxMedia(w http.ResponseWriter, r *http.Request) {
	if tok := r.Header.Get("Authorization"); len(tok) <= len("Bearer ") {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]any{"code": 190, "message": "Invalid OAuth access token"}})
		return
	}
	id := pathVar(r, "media_id")
	file := sandboxImage(id)
	sum := sha256.Sum256(file)
	writeJSON(w, http.StatusOK, map[string]any{
		"messaging_product": "whatsapp",
		"url":               "http://" + r.Host + "/sandbox/media/" + url.PathEscape(id),
		"mime_type":         "image/png",
		"sha256":            hex.EncodeToString(sum[:]),
		"file_size":         len(file),
		"id":                id,
	})
}

// sandboxMediaFile serves the generated image of a media id.
func (s *Server) sandboxMediaFile(w http.ResponseWriter, r *http.Request) {
	file := sandboxImage(pathVar(r, "media_id"))
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Content-Length", strconv.Itoa(len(file)))
	_, _ = w.Write(file)
}

// sandboxImage is a 64×64 PNG in a colour of its own for each media id.
func sandboxImage(id string) []byte {
	sum := sha256.Sum256([]byte(id))
	img := image.NewRGBA(image.Rect(0, 0, 64, 64))
	c := color.RGBA{R: sum[0], G: sum[1], B: sum[2], A: 255}
	for y := range 64 {
		for x := range 64 {
			if (x/8+y/8)%2 == 0 {
				img.Set(x, y, c)
			} else {
				img.Set(x, y, color.White)
			}
		}
	}
	var b bytes.Buffer
	_ = png.Encode(&b, img)
	return b.Bytes()
}
