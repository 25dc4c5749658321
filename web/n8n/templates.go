// Package n8n holds ordo's n8n workflow templates: the sync handler, the
// async handler with a slow AI step, sending from a flow and reacting to
// tenant events, as n8n 1.x imports them (`n8n import:workflow` or the
// editor's "Import from file"). `ordo n8n templates` writes them with a
// tenant's names and URLs filled in; `make n8n-e2e` runs them on a real n8n.
//
// The node-* templates use the ordo community node (n8n-nodes-ordo, in
// n8n-nodes-ordo/ beside this file): its Ordo Trigger checks ordo's
// signature and its Ordo node sends, posts replies and takes leases. The
// others use n8n's own Webhook and HTTP Request nodes: nothing to install.
package n8n

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"strings"
)

//go:embed templates/*.json
var files embed.FS

// Vars fill a template in.
type Vars struct {
	// Tenant is the tenant's slug: it names the workflows, their webhook
	// paths (ordo-<tenant>-sync, -async, -send, -events) and credentials.
	Tenant string
	// OrdoURL is ordo's base URL as n8n reaches it, e.g. http://ordo:8080.
	OrdoURL string
	// NotifyURL is where the events workflow posts its alerts (a Slack or
	// chat webhook, say).
	NotifyURL string
	// HandlerCredentialID and APICredentialID are the ids of the n8n
	// credentials the workflows use: a Header Auth credential holding the
	// tenant's handler auth header (n8n checks ordo's calls with it), and a
	// Header Auth credential "Authorization: Bearer <API key>". Empty: the
	// credential is looked up by name in the editor after the import.
	HandlerCredentialID, APICredentialID string
	// NodeHandlerCredentialID and NodeAPICredentialID are the ids of the
	// ordo node's credentials the node-* templates use: an "Ordo Handler
	// API" credential (the tenant's handler secret) and an "Ordo API" one
	// (ordo's URL and the API key). Empty: NodeCredentialIDs.
	NodeHandlerCredentialID, NodeAPICredentialID string
}

// Names lists the templates, e.g. "sync-handler".
func Names() []string {
	entries, _ := fs.ReadDir(files, "templates")
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	return names
}

// triggers is each template's webhook path suffix.
var triggers = map[string]string{"sync-handler": "sync", "async-handler": "async", "send-from-flow": "send", "events": "events",
	"node-sync-handler": "node-sync", "node-sync-last-node": "node-last", "node-async-handler": "node-async", "node-send-from-flow": "node-send"}

// WebhookPath is the path of template name's trigger under n8n's /webhook/
// for tenant: the handler_url (sync-handler, async-handler) or events_url
// (events) to give ordo is n8n's base URL + "/webhook/" + it.
func WebhookPath(name, tenant string) string { return "ordo-" + tenant + "-" + triggers[name] }

// CredentialIDs are the n8n credential ids the templates of tenant use
// when Vars leaves them empty.
func CredentialIDs(tenant string) (handler, api string) {
	sum := sha256.Sum256([]byte(tenant))
	id := hex.EncodeToString(sum[:8])
	return "ordoH" + id, "ordoA" + id
}

// NodeCredentialIDs are the n8n credential ids of the ordo node's
// credentials (handler secret, API) the node-* templates of tenant use when
// Vars leaves them empty.
func NodeCredentialIDs(tenant string) (handler, api string) {
	sum := sha256.Sum256([]byte(tenant))
	id := hex.EncodeToString(sum[:8])
	return "ordoS" + id, "ordoN" + id
}

// Render returns template name with v filled in.
func Render(name string, v Vars) ([]byte, error) {
	raw, err := files.ReadFile(path.Join("templates", name+".json"))
	if err != nil {
		return nil, fmt.Errorf("no n8n template %q (have %s)", name, strings.Join(Names(), ", "))
	}
	if v.Tenant == "" || v.OrdoURL == "" {
		return nil, errors.New("n8n template: the tenant and ordo's URL are required")
	}
	for _, u := range []string{v.OrdoURL, v.NotifyURL} {
		if u == "" {
			continue
		}
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || strings.ContainsAny(u, "\"\\ ") {
			return nil, fmt.Errorf("n8n template: %q is not an http(s) URL", u)
		}
	}
	h, a := CredentialIDs(v.Tenant)
	v.HandlerCredentialID, v.APICredentialID = cmp.Or(v.HandlerCredentialID, h), cmp.Or(v.APICredentialID, a)
	nh, na := NodeCredentialIDs(v.Tenant)
	v.NodeHandlerCredentialID, v.NodeAPICredentialID = cmp.Or(v.NodeHandlerCredentialID, nh), cmp.Or(v.NodeAPICredentialID, na)
	if v.NotifyURL == "" {
		v.NotifyURL = "https://example.com/replace-with-your-alert-webhook"
	}
	// Webhook ids are unique per n8n instance: derive them from the tenant.
	sum := sha256.Sum256([]byte(v.Tenant))
	r := strings.NewReplacer(
		"__TENANT__", v.Tenant,
		"__ORDO_URL__", strings.TrimRight(v.OrdoURL, "/"),
		"__NOTIFY_URL__", v.NotifyURL,
		"__HANDLER_CREDENTIAL_ID__", v.HandlerCredentialID,
		"__API_CREDENTIAL_ID__", v.APICredentialID,
		"__ORDO_HANDLER_CREDENTIAL_ID__", v.NodeHandlerCredentialID,
		"__ORDO_API_CREDENTIAL_ID__", v.NodeAPICredentialID,
		"__HOOKID__", hex.EncodeToString(sum[:6]),
	)
	return bytes.TrimSpace([]byte(r.Replace(string(raw)))), nil
}
