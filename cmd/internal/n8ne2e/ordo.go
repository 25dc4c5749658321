//go:build n8ne2e

package n8ne2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/proc"
)

// ordoDev is a fresh `ordo dev` in a directory of its own, driven as a user
// drives it: its printed API key, the `ordo` commands run in the same
// directory with nothing set by hand, and its REST API.
type ordoDev struct {
	t    *testing.T
	bin  string
	dir  string
	base string
	key  string // the demo tenant's API key
	p    *proc.Proc
}

var devKey = regexp.MustCompile(`Authorization: Bearer (\S+)\)`)

func startOrdoDev(t *testing.T, bin, dir string) *ordoDev {
	t.Helper()
	port := freePort(t)
	o := &ordoDev{t: t, bin: bin, dir: dir, base: "http://127.0.0.1:" + strconv.Itoa(port)}
	ready := make(chan string, 1)
	o.p = proc.New(proc.Config{
		Name: "ordo dev", Argv: []string{bin, "dev"}, Dir: dir, LogPath: filepath.Join(dir, "ordo-dev.log"),
		Env: append(cleanEnv(), "ORDO_ADDR=127.0.0.1:"+strconv.Itoa(port), "ORDO_LOG_LEVEL=info"),
		Stdout: func(line string) {
			if m := devKey.FindStringSubmatch(line); m != nil {
				ready <- m[1]
			}
		},
	})
	if err := o.p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o.p.Stop(30 * time.Second) })
	select {
	case o.key = <-ready:
	case <-o.p.Done():
		t.Fatalf("ordo dev exited: %v%s", o.p.Err(), o.p.LogTail())
	case <-time.After(2 * time.Minute):
		t.Fatalf("ordo dev did not come up%s", o.p.LogTail())
	}
	return o
}

// cleanEnv is this environment without ordo's variables: the commands must
// find `ordo dev`'s database and keys by themselves.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ORDO_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			env = append(env, kv)
		}
	}
	return env
}

// cli runs `ordo args…` in ordo dev's directory with stdin and returns
// stdout.
func (o *ordoDev) cli(stdin string, args ...string) string {
	o.t.Helper()
	cmd := exec.Command(o.bin, args...)
	cmd.Dir, cmd.Env, cmd.Stdin = o.dir, cleanEnv(), strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		o.t.Fatalf("ordo %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// createTenant creates a tenant with a sandbox WhatsApp credential and
// returns its API key and handler secret.
func (o *ordoDev) createTenant(slug string, n int) (key, secret string) {
	o.t.Helper()
	var created struct {
		APIKey        string `json:"api_key"`
		HandlerSecret string `json:"handler_secret"`
	}
	if err := json.Unmarshal([]byte(o.cli("", "tenant", "create", "--slug", slug)), &created); err != nil || created.APIKey == "" || created.HandlerSecret == "" {
		o.t.Fatalf("ordo tenant create %s: %v", slug, err)
	}
	cred, _ := json.Marshal(map[string]string{"phone_number_id": phoneNumberID(n), "access_token": "sandbox-token",
		"app_secret": appSecret(slug), "verify_token": "verify-" + slug})
	o.cli(string(cred), "credential", "set", "--tenant", slug, "--name", "whatsapp", "--from-file", "-")
	return created.APIKey, created.HandlerSecret
}

func phoneNumberID(n int) string   { return strconv.Itoa(100000000000100 + n) }
func appSecret(slug string) string { return "app-secret-" + slug }

// do sends a request to ordo with a tenant's key and decodes the answer.
func (o *ordoDev) do(ctx context.Context, method, key, path string, body, out any) int {
	o.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(ctx, method, o.base+path, r)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		o.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			o.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode
}

// inbound posts an end user's message as ordo takes it over REST.
func (o *ordoDev) inbound(ctx context.Context, key, conv, id, text string) {
	o.t.Helper()
	status := o.do(ctx, http.MethodPost, key, "/v1/messages", map[string]any{
		"message_id": id, "conversation_id": conv, "direction": "inbound",
		"payload": map[string]any{"from": conv, "id": id, "type": "text", "text": map[string]string{"body": text}},
	}, nil)
	if status != http.StatusAccepted && status != http.StatusOK {
		o.t.Fatalf("post inbound %s: %d", id, status)
	}
}

// sandboxSend is one send the sandbox took.
type sandboxSend struct {
	PhoneNumberID string `json:"phone_number_id"`
	WAMID         string `json:"wamid"`
	Body          struct {
		To   string `json:"to"`
		Text struct {
			Body string `json:"body"`
		} `json:"text"`
	} `json:"body"`
}

// sends returns the sandbox's recent sends to conv, oldest first.
func (o *ordoDev) sends(ctx context.Context, conv string) []sandboxSend {
	var out struct {
		Sends []sandboxSend `json:"sends"`
	}
	o.do(ctx, http.MethodGet, "", "/sandbox/sends", nil, &out)
	var got []sandboxSend
	for i := len(out.Sends) - 1; i >= 0; i-- {
		if out.Sends[i].Body.To == conv {
			got = append(got, out.Sends[i])
		}
	}
	return got
}

// texts is the bodies of sends.
func texts(sends []sandboxSend) []string {
	out := make([]string, len(sends))
	for i, s := range sends {
		out[i] = s.Body.Text.Body
	}
	return out
}

// deadLetter is one of a tenant's dead letters as the API shows it.
type deadLetter struct {
	ID             string `json:"id"`
	MessageID      string `json:"message_id"`
	ConversationID string `json:"conversation_id"`
	Reason         string `json:"reason"`
}

func (o *ordoDev) deadLetters(ctx context.Context, key, conv string) []deadLetter {
	var out struct {
		DeadLetters []deadLetter `json:"dead_letters"`
	}
	o.do(ctx, http.MethodGet, key, "/v1/dead-letters?conversation_id="+url.QueryEscape(conv), nil, &out)
	return out.DeadLetters
}

// conversationStatus is active or halted.
func (o *ordoDev) conversationStatus(ctx context.Context, key, conv string) string {
	var out struct {
		Status string `json:"status"`
	}
	o.do(ctx, http.MethodGet, key, "/v1/conversations/"+url.PathEscape(conv), nil, &out)
	return out.Status
}

// statusWebhook posts Meta's signed status webhook for a send.
func (o *ordoDev) statusWebhook(ctx context.Context, slug string, s sandboxSend, status string) {
	o.t.Helper()
	body, _ := json.Marshal(map[string]any{"object": "whatsapp_business_account", "entry": []any{map[string]any{
		"id": "waba", "changes": []any{map[string]any{"field": "messages", "value": map[string]any{
			"messaging_product": "whatsapp", "metadata": map[string]string{"phone_number_id": s.PhoneNumberID},
			"statuses": []any{map[string]any{"id": s.WAMID, "status": status, "recipient_id": s.Body.To,
				"timestamp": strconv.FormatInt(time.Now().Unix(), 10)}},
		}}}}}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, o.base+"/webhooks/whatsapp/"+slug, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex(appSecret(slug), body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		o.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		o.t.Fatalf("status webhook: %d", resp.StatusCode)
	}
}

func must(t *testing.T, err error, format string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(format, args...), err)
	}
}
