package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/sql/sqltest"
	"github.com/ordo-dev/ordo/tenants"
)

// idCase is one id and the verdict the contract gives it: 1 to 256
// printable characters, no control characters or surrounding spaces;
// invalid UTF-8 or a lone surrogate anywhere is refused.
type idCase struct {
	name string
	// id is the id as Go (and SQL) holds it.
	id string
	// literal, when set, is the id's JSON string literal (quotes included)
	// where json.Marshal cannot write it: invalid UTF-8, a lone surrogate.
	literal string
	// problem is what the rule says of the id without a field name ("" for
	// valid). A problem of the body's text (invalid UTF-8, a lone
	// surrogate) has notText set: REST and the webhook refuse the body
	// before any field is read, and Postgres refuses the bytes (SQLSTATE
	// 22021) before ordo.enqueue_message runs.
	problem string
	notText bool
}

// idCases is the one table every way in and both forms of the rule (Go's
// whatsapp.CheckID, SQL's ordo.id_problem) are held to.
var idCases = []idCase{
	{name: "short", id: "m1"},
	{name: "a wamid", id: "wamid.HBgLMTY1MDM4Nzk0MzkVAgARGBJBRkQ0RTlCMDkzNjQ0NjYxRTAA"},
	{name: "inner space", id: "a b"},
	{name: "inner no-break space", id: "a\u00a0b"},
	{name: "URL characters", id: "a/b?c=d#e f%20"},
	{name: "non-ASCII letters", id: "Zoë-日本-Ελλάδα"},
	{name: "emoji", id: "😀"},
	{name: "a real U+FFFD", id: "m\uFFFD"},
	{name: "256 ASCII", id: strings.Repeat("x", 256)},
	{name: "256 characters, 512 bytes", id: strings.Repeat("é", 256)},
	{name: "256 characters, 1024 bytes", id: strings.Repeat("😀", 256)},
	{name: "empty", id: "", problem: "required"},
	{name: "257 ASCII", id: strings.Repeat("x", 257), problem: "must be 1 to 256 printable characters, not 257"},
	{name: "257 characters, 514 bytes", id: strings.Repeat("é", 257), problem: "must be 1 to 256 printable characters, not 257"},
	{name: "a control character", id: "m\x01", problem: ctrl("U+0001", 2)},
	{name: "a newline", id: "m\n1", problem: ctrl("U+000A", 2)},
	{name: "a tab inside", id: "m\t1", problem: ctrl("U+0009", 2)},
	{name: "a trailing tab", id: "m1\t", problem: ctrl("U+0009", 3)},
	{name: "DEL", id: "m\x7f", problem: ctrl("U+007F", 2)},
	{name: "C1 (U+0085)", id: "m\u0085", problem: ctrl("U+0085", 2)},
	{name: "C1 (U+009F)", id: "\u009fm", problem: ctrl("U+009F", 1)},
	{name: "line separator U+2028", id: "m\u20281", problem: ctrl("U+2028", 2)},
	{name: "paragraph separator U+2029", id: "m\u2029", problem: ctrl("U+2029", 2)},
	{name: "a space", id: " ", problem: ends("U+0020", 1)},
	{name: "a leading space", id: " m1", problem: ends("U+0020", 1)},
	{name: "a trailing space", id: "m1 ", problem: ends("U+0020", 3)},
	{name: "a leading no-break space", id: "\u00a0m1", problem: ends("U+00A0", 1)},
	{name: "a trailing ideographic space", id: "m1\u3000", problem: ends("U+3000", 3)},
	{name: "invalid UTF-8", id: "m\xff", literal: "\"m\xff\"", problem: "not valid UTF-8", notText: true},
	{name: "a lone surrogate", id: "m\xed\xa0\x80", literal: `"m\ud800"`, problem: "a lone UTF-16 surrogate", notText: true},
}

func ctrl(char string, at int) string {
	return fmt.Sprintf("must be 1 to 256 printable characters, without control characters or line separators: %s at character %d", char, at)
}

func ends(char string, at int) string {
	return fmt.Sprintf("must be 1 to 256 printable characters, without a space at either end: %s at character %d", char, at)
}

// jsonString is the id's JSON string literal.
func (c idCase) jsonString() string {
	if c.literal != "" {
		return c.literal
	}
	b, _ := json.Marshal(c.id)
	return string(b)
}

// verdict is how one way in answered one id: "" accepted, else the problem
// it named (the REST message or webhook problem, or the SQL exception's
// message) with the field; sqlstate for SQL.
type verdict struct {
	accepted bool
	status   int
	code     string
	message  string
	sqlstate string
}

// An id gets the same verdict whichever way it comes in: REST's POST
// /v1/messages, another application's SQL (ordo.enqueue_message in its own
// transaction) and Meta's signed webhook (a wamid becomes a message_id, a
// sender's wa_id a conversation_id). Accepted everywhere, or refused
// everywhere with the field and the same words (REST 400 invalid_request,
// SQL 22023, webhook 400), and a refusal stores nothing.
func TestOneIDRuleOnEveryWayIn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := start(t, options{jobs: jobstest.Options{NoStart: true}})
	// One tenant per way in, so an id accepted by one is new to the next.
	e.AddTenant("sqlapp", "2000002", tenants.UpdateParams{})
	e.AddTenant("hooks", "3000003", tenants.UpdateParams{})

	count := func(slug string) int {
		return e.Count(`SELECT count(*) FROM ordo.messages m JOIN ordo.tenants t ON t.id = m.tenant_id WHERE t.slug = $1`, slug) +
			e.Count(`SELECT count(*) FROM ordo.conversations c JOIN ordo.tenants t ON t.id = c.tenant_id WHERE t.slug = $1`, slug)
	}

	rest := func(field string, c idCase, i int) verdict {
		mid, conv := fmt.Sprintf(`"m-%d"`, i), fmt.Sprintf(`"c-%d"`, i)
		if field == "message_id" {
			mid = c.jsonString()
		} else {
			conv = c.jsonString()
		}
		body := `{"message_id":` + mid + `,"conversation_id":` + conv + `,"to":"16505551234","type":"text","text":{"body":"hi"}}`
		a := e.call(t, request{method: http.MethodPost, path: "/v1/messages", key: e.APIKey, body: body})
		v := verdict{accepted: a.status == http.StatusAccepted, status: a.status}
		if !v.accepted {
			var b struct {
				Error struct{ Code, Message string }
			}
			_ = json.Unmarshal(a.body, &b)
			v.code, v.message = b.Error.Code, b.Error.Message
		}
		return v
	}

	sqlCall := func(field string, c idCase, i int) verdict {
		mid, conv := fmt.Sprintf("m-%d", i), fmt.Sprintf("c-%d", i)
		if field == "message_id" {
			mid = c.id
		} else {
			conv = c.id
		}
		err := pgx.BeginFunc(ctx, e.Pool, func(tx pgx.Tx) error {
			var id, seq int64
			var dup bool
			return tx.QueryRow(ctx, `SELECT * FROM ordo.enqueue_message($1, $2, $3, $4, $5)`,
				"sqlapp", conv, mid, "outbound", jobstest.Outbound("16505551234", "hi")).Scan(&id, &seq, &dup)
		})
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			return verdict{accepted: true}
		case errors.As(err, &pgErr):
			return verdict{sqlstate: pgErr.Code, message: pgErr.Message}
		}
		t.Fatalf("%s %s through SQL: %v", field, c.name, err)
		return verdict{}
	}

	hook := func(field string, c idCase, i int) verdict {
		from, wamid := fmt.Sprintf(`"1650555%04d"`, i), fmt.Sprintf(`"wamid.%d"`, i)
		if field == "message_id" {
			wamid = c.jsonString()
		} else {
			from = c.jsonString()
		}
		body := []byte(`{"object":"whatsapp_business_account","entry":[{"id":"WABA","changes":[{"field":"messages","value":{` +
			`"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550001111","phone_number_id":"3000003"},` +
			`"contacts":[{"profile":{"name":"User"},"wa_id":` + from + `}],` +
			`"messages":[{"from":` + from + `,"id":` + wamid + `,"timestamp":"1750263773","type":"text","text":{"body":"hi"}}]}}]}]}`)
		req, err := http.NewRequest(http.MethodPost, e.URL+"/webhooks/whatsapp/hooks", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Hub-Signature-256", whatsapp.Sign("app-secret-hooks", body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("deliver webhook: %v", err)
		}
		defer resp.Body.Close()
		var b struct {
			Accepted int
			Error    struct{ Code, Message string }
		}
		_ = json.NewDecoder(resp.Body).Decode(&b)
		return verdict{accepted: resp.StatusCode == http.StatusOK && b.Accepted == 1, status: resp.StatusCode, code: b.Error.Code, message: b.Error.Message}
	}

	webhookField := map[string]string{"message_id": "id", "conversation_id": "sender id"}
	for i, c := range idCases {
		for _, field := range []string{"message_id", "conversation_id"} {
			what := fmt.Sprintf("%s %s (%q)", field, c.name, c.id)
			before := [3]int{count("acme"), count("sqlapp"), count("hooks")}
			r, s, h := rest(field, c, i), sqlCall(field, c, i), hook(field, c, i)
			after := [3]int{count("acme"), count("sqlapp"), count("hooks")}
			if c.problem == "" {
				if !r.accepted || !s.accepted || !h.accepted {
					t.Errorf("%s: want accepted everywhere; REST %+v, SQL %+v, webhook %+v", what, r, s, h)
				}
				continue
			}
			if after != before {
				t.Errorf("%s: refused, yet rows were stored: %v → %v", what, before, after)
			}
			// REST: 400 invalid_request naming the field (or the body, for
			// text Postgres could not hold).
			want := field + ": " + c.problem
			if c.notText {
				want = "body: "
			}
			if r.status != http.StatusBadRequest || r.code != "invalid_request" || !strings.HasPrefix(r.message, want) || (c.notText && !strings.Contains(r.message, c.problem)) {
				t.Errorf("%s: REST answered %d %s %q; want 400 invalid_request %q (with %q)", what, r.status, r.code, r.message, want, c.problem)
			}
			// SQL: ordo's 22023 with the same words, or Postgres's own
			// refusal of bytes that are not UTF-8.
			switch {
			case c.notText:
				if s.accepted || s.sqlstate != pgerrcode.CharacterNotInRepertoire {
					t.Errorf("%s: SQL answered %+v; want SQLSTATE 22021", what, s)
				}
			case s.accepted || s.sqlstate != pgerrcode.InvalidParameterValue || s.message != field+": "+c.problem:
				t.Errorf("%s: SQL answered %+v; want SQLSTATE 22023 %q", what, s, field+": "+c.problem)
			}
			// Webhook: the delivery is refused, 400 invalid_request naming
			// the id's place in Meta's body and the same words.
			wantHook := webhookField[field] + ": " + c.problem
			switch {
			case c.notText:
				wantHook = c.problem
			case c.id == "" && field == "conversation_id":
				wantHook = "from: required" // no sender at all
			}
			if h.status != http.StatusBadRequest || h.code != "invalid_request" || !strings.Contains(h.message, wantHook) {
				t.Errorf("%s: webhook answered %d %s %q; want 400 invalid_request with %q", what, h.status, h.code, h.message, wantHook)
			}
		}
	}
}

// The rule's two forms are one predicate with one wording: Go's
// whatsapp.CheckID (REST's and the webhook's 400) and SQL's ordo.id_problem
// (what ordo.enqueue_message raises) answer the same for the table, and for
// every character of the Basic Multilingual Plane alone, inside an id and
// at either end of one (the planes above, which hold no control or space
// character, sampled).
func TestIDRuleGoAndSQLAgree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, sqltest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	sqlProblem := func(id string) string {
		var p *string
		if err := conn.QueryRow(ctx, `SELECT ordo.id_problem($1)`, id).Scan(&p); err != nil {
			t.Fatalf("ordo.id_problem(%q): %v", id, err)
		}
		if p == nil {
			return ""
		}
		return *p
	}
	goProblem := func(id string) string {
		if err := whatsapp.CheckID(id); err != nil {
			return err.Error()
		}
		return ""
	}
	for _, c := range idCases {
		if c.notText {
			// As Go and Postgres hold it (WTF-8 for a lone surrogate), not
			// UTF-8: Postgres refuses the bytes before any function runs.
			if got := goProblem(c.id); got != "not valid UTF-8" {
				t.Errorf("%s (%q): whatsapp.CheckID says %q, want not valid UTF-8", c.name, c.id, got)
			}
			continue
		}
		if got := goProblem(c.id); got != c.problem {
			t.Errorf("%s (%q): whatsapp.CheckID says %q, want %q", c.name, c.id, got, c.problem)
		}
		if got := sqlProblem(c.id); got != c.problem {
			t.Errorf("%s (%q): ordo.id_problem says %q, want %q", c.name, c.id, got, c.problem)
		}
	}

	// Every code point as an id of its own, inside one and at either end:
	// the ones either form refuses, with their words, must be the same.
	const sweep = `
SELECT cp, f, ordo.id_problem(CASE f WHEN 0 THEN chr(cp) WHEN 1 THEN 'a' || chr(cp) || 'b' WHEN 2 THEN chr(cp) || 'b' ELSE 'a' || chr(cp) END) AS p
FROM (SELECT cp FROM generate_series(1, 65535) cp WHERE cp NOT BETWEEN 55296 AND 57343
      UNION ALL SELECT cp FROM generate_series(65536, 1114111, 257) cp) cps, generate_series(0, 3) f`
	forms := func(r rune, f int) string {
		return [...]string{string(r), "a" + string(r) + "b", string(r) + "b", "a" + string(r)}[f]
	}
	rows, err := conn.Query(ctx, `SELECT cp, f, p FROM (`+sweep+`) s WHERE p IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	refusedBySQL := map[string]string{}
	checked := 0
	for rows.Next() {
		var cp int32
		var f int
		var p string
		if err := rows.Scan(&cp, &f, &p); err != nil {
			t.Fatal(err)
		}
		refusedBySQL[forms(rune(cp), f)] = p
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for cp := rune(1); cp <= 0x10FFFF; cp++ {
		if cp >= 0xD800 && cp <= 0xDFFF || cp > 0xFFFF && (cp-0x10000)%257 != 0 {
			continue
		}
		for f := range 4 {
			id := forms(cp, f)
			checked++
			if got, want := goProblem(id), refusedBySQL[id]; got != want {
				t.Errorf("U+%04X as %q: whatsapp.CheckID says %q, ordo.id_problem %q", cp, id, got, want)
			}
		}
	}
	if len(refusedBySQL) < 4*65 || checked < 4*63000 {
		t.Fatalf("the sweep refused %d of %d ids: it did not run over the characters", len(refusedBySQL), checked)
	}
}
