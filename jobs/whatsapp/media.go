package whatsapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// MaxMediaBytes is the largest media file ordo streams: Meta's own cap on
// a WhatsApp media file (100 MB, documents).
const MaxMediaBytes = 100 << 20

// ErrMediaNotFound is Media's answer when Meta does not know the media id
// (or no longer: an inbound media id lives 30 days, its URL 5 minutes).
var ErrMediaNotFound = errors.New("media not found at WhatsApp")

// Media is an inbound media file being downloaded; the caller streams Body
// and closes it.
type Media struct {
	Body io.ReadCloser
	// ContentType is Meta's Content-Type of the download (else the
	// mime_type the id resolved with).
	ContentType string
	// Length is the download's Content-Length, -1 when unknown.
	Length int64
}

// mediaInfo is Meta's answer to GET /{media_id}.
type mediaInfo struct {
	URL      string `json:"url"`
	MIMEType string `json:"mime_type"`
	FileSize int64  `json:"file_size"`
}

// Media resolves mediaID with the tenant's token (GET {BaseURL}/{media_id}
// → {"url","mime_type",…}) and starts downloading the URL with the same
// token. Nothing is buffered: the body streams from Meta. ErrMediaNotFound
// when Meta answers 400 or 404 to the id; a file larger than MaxMediaBytes
// by its declared length is refused; any other failure is a *SendError
// (the token is never in it). The HTTP client's Timeout bounds the whole
// download, so a client meant for media needs a long one (or none, with
// ctx bounding it).
func (c *Client) Media(ctx context.Context, cred Credential, mediaID string) (*Media, error) {
	if strings.TrimSpace(cred.AccessToken) == "" {
		return nil, &SendError{Class: Paused, Code: NoCode, Err: errors.New("whatsapp credential: access_token: required")}
	}
	base := c.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	resp, err := c.get(ctx, cred, strings.TrimRight(base, "/")+"/"+url.PathEscape(mediaID))
	if err != nil {
		return nil, err
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusBadRequest {
		return nil, ErrMediaNotFound
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, apiError(resp, raw, cred.AccessToken, time.Now())
	}
	var info mediaInfo
	if err := json.Unmarshal(raw, &info); err != nil || info.URL == "" {
		return nil, &SendError{Class: Retry, HTTPStatus: resp.StatusCode, Code: NoCode, Message: "media answer without a url"}
	}
	if u, err := url.Parse(info.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, &SendError{Class: Permanent, HTTPStatus: resp.StatusCode, Code: NoCode, Message: "media answer with a url that is not http(s)"}
	}
	if info.FileSize > MaxMediaBytes {
		return nil, &SendError{Class: Permanent, Code: NoCode, Message: fmt.Sprintf("media of %d bytes is over the %d-byte cap", info.FileSize, MaxMediaBytes)}
	}
	resp, err = c.get(ctx, cred, info.URL)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusNotFound {
		resp.Body.Close()
		return nil, ErrMediaNotFound
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
		resp.Body.Close()
		return nil, apiError(resp, raw, cred.AccessToken, time.Now())
	}
	if resp.ContentLength > MaxMediaBytes {
		resp.Body.Close()
		return nil, &SendError{Class: Permanent, Code: NoCode, Message: fmt.Sprintf("media of %d bytes is over the %d-byte cap", resp.ContentLength, MaxMediaBytes)}
	}
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = info.MIMEType
	}
	return &Media{Body: resp.Body, ContentType: ct, Length: resp.ContentLength}, nil
}

// get is an authenticated GET; a transport failure is a *SendError
// without the token.
func (c *Client) get(ctx context.Context, cred Credential, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, &SendError{Class: Permanent, Code: NoCode, Err: fmt.Errorf("build request: %w", scrubErr(err, cred.AccessToken))}
	}
	req.Header.Set("Authorization", "Bearer "+cred.AccessToken)
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, transportError(ctx, err, false, cred.AccessToken)
	}
	return resp, nil
}
