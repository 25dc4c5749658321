package n8n

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestEveryTemplateRendersToAnImportableWorkflow(t *testing.T) {
	t.Parallel()
	names := Names()
	if len(names) != 8 {
		t.Fatalf("templates = %v, want the sync and async handlers, send-from-flow and events, and the node variants", names)
	}
	for _, name := range names {
		wf, err := Render(name, Vars{Tenant: "shop-1", OrdoURL: "http://ordo:8080/", NotifyURL: "http://hooks.example/x"})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if strings.Contains(string(wf), "__") {
			t.Errorf("%s: a placeholder is left: %s", name, wf)
		}
		var w struct {
			Name  string `json:"name"`
			Nodes []struct {
				Type       string         `json:"type"`
				Parameters map[string]any `json:"parameters"`
			} `json:"nodes"`
			Connections map[string]any `json:"connections"`
		}
		if err := json.Unmarshal(wf, &w); err != nil {
			t.Fatalf("%s: not JSON: %v", name, err)
		}
		if !strings.Contains(w.Name, "shop-1") || len(w.Nodes) < 2 || len(w.Connections) < 1 {
			t.Errorf("%s: name %q, %d nodes, %d connections", name, w.Name, len(w.Nodes), len(w.Connections))
		}
		trigger := "n8n-nodes-base.webhook"
		if strings.HasPrefix(name, "node-") && name != "node-send-from-flow" {
			trigger = "n8n-nodes-ordo.ordoTrigger"
		}
		if w.Nodes[0].Type != trigger || w.Nodes[0].Parameters["path"] != WebhookPath(name, "shop-1") {
			t.Errorf("%s: trigger %s at %v, want a webhook at %s", name, w.Nodes[0].Type, w.Nodes[0].Parameters["path"], WebhookPath(name, "shop-1"))
		}
		// n8n ends an expression at the first "}}": an object literal
		// closing inside one breaks the node at run time.
		for _, n := range w.Nodes {
			for k, v := range n.Parameters {
				if s, ok := v.(string); ok && strings.HasPrefix(s, "=") && strings.Count(s, "}}") != strings.Count(s, "{{") {
					t.Errorf("%s: parameter %s has a stray }} in its expression: %s", name, k, s)
				}
			}
		}
	}
}

func TestTemplateURLsMustBeURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"ordo:8080", `http://x/"},{"evil":"`, "ftp://x", "http://"} {
		if _, err := Render("sync-handler", Vars{Tenant: "t", OrdoURL: u}); err == nil {
			t.Errorf("ordo URL %q accepted", u)
		}
	}
	if _, err := Render("nope", Vars{Tenant: "t", OrdoURL: "http://x"}); err == nil {
		t.Error("an unknown template rendered")
	}
}
