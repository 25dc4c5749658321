package whatsapp

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A few long strings for the length limits.
var (
	s20   = strings.Repeat("b", 20)
	s21   = strings.Repeat("b", 21)
	s60   = strings.Repeat("h", 60)
	s61   = strings.Repeat("h", 61)
	s1024 = strings.Repeat("c", 1024)
	s1025 = strings.Repeat("c", 1025)
	s4096 = strings.Repeat("é", 4096) // characters, not bytes
	s4097 = strings.Repeat("a", 4097)
)

// interactive wraps an interactive object in a message.
func interactive(obj string) string { return `{"type":"interactive","interactive":` + obj + `}` }

// button builds a reply-button action entry.
func button(id, title string) string {
	return `{"type":"reply","reply":{"id":"` + id + `","title":"` + title + `"}}`
}

// rows builds n list rows with ids prefix0..prefixN-1.
func rows(prefix string, n int) string {
	r := make([]string, n)
	for i := range r {
		r[i] = `{"id":"` + prefix + string(rune('a'+i)) + `","title":"Row"}`
	}
	return "[" + strings.Join(r, ",") + "]"
}

// products builds n product items.
func products(n int) string {
	r := make([]string, n)
	for i := range r {
		r[i] = `{"product_retailer_id":"sku-` + string(rune('a'+i%26)) + `"}`
	}
	return "[" + strings.Join(r, ",") + "]"
}

func TestValidateMessage(t *testing.T) {
	t.Parallel()
	const allTypes = "type: must be one of text, template, image, audio, video, document, sticker, interactive, location, reaction, contacts"
	tests := []struct {
		name string
		msg  string
		want string // "" for valid
	}{
		// The three examples.
		{"type is a number", `{"type":123,"text":{"body":"hi"}}`, allTypes},
		{"text is a string", `{"type":"text","text":"hi"}`, "text: must be an object"},
		{"number beyond float64", `{"type":"text","text":{"body":"hi","preview_url":1e999}}`, "text.preview_url: number out of range"},
		{"number beyond float64 in a body", `{"type":"text","text":{"body":-1e999}}`, "text.body: number out of range"},

		// The message as a whole.
		{"not JSON", `{"type":`, "message: not valid JSON"},
		{"two values", `{"type":"text","text":{"body":"a"}} {}`, "message: not valid JSON (more after the message)"},
		{"an array", `[{"type":"text","text":{"body":"a"}}]`, "message: must be a JSON object"},
		{"null", `null`, "message: must be a JSON object"},
		{"no type", `{"text":{"body":"hi"}}`, "type: required"},
		// A type Meta adds later passes with its envelope checked (issue 26).
		{"unknown type", `{"type":"carrier_pigeon","carrier_pigeon":{"any":1}}`, ""},
		{"unknown type, bad envelope", `{"type":"carrier_pigeon","to":""}`, "to: must not be empty"},
		{"unknown type, unknown field", `{"type":"carrier_pigeon","colour":"red"}`, "colour: not allowed"},
		{"type null", `{"type":null}`, allTypes},
		// Only a type name passes as a type Meta may add (the fuzzer sent "" and "00").
		{"type empty", `{"to":"0","type":""}`, allTypes},
		{"type not a name", `{"type": "00"}`, allTypes},
		{"unknown field", `{"type":"text","text":{"body":"hi"},"colour":"red"}`, "colour: not allowed"},
		{"unknown field with an odd name", `{"type":"text","text":{"body":"hi"},"a.b":1}`, `["a.b"]: not allowed`},
		{"another type's object", `{"type":"text","text":{"body":"hi"},"image":{"id":"1"}}`, "image: not allowed when type is text"},
		{"ordo's send fields", `{"messaging_product":"whatsapp","recipient_type":"individual","to":"16505551234","biz_opaque_callback_data":"step-1","type":"text","text":{"body":"hi"}}`, ""},
		{"messaging_product other than whatsapp", `{"messaging_product":"sms","type":"text","text":{"body":"hi"}}`, "messaging_product: must be whatsapp"},
		{"recipient_type unknown", `{"recipient_type":"everyone","type":"text","text":{"body":"hi"}}`, "recipient_type: must be one of individual, group"},
		{"to empty", `{"to":"","type":"text","text":{"body":"hi"}}`, "to: must not be empty"},
		{"to a number", `{"to":16505551234,"type":"text","text":{"body":"hi"}}`, "to: must be a string"},
		{"callback data too long", `{"biz_opaque_callback_data":"` + strings.Repeat("x", 513) + `","type":"text","text":{"body":"hi"}}`, "biz_opaque_callback_data: longer than 512 characters"},
		{"reply context", `{"context":{"message_id":"wamid.X"},"type":"text","text":{"body":"hi"}}`, ""},
		{"reply context without id", `{"context":{},"type":"text","text":{"body":"hi"}}`, "context.message_id: required"},

		// text
		{"text", `{"type":"text","text":{"body":"Step 1"}}`, ""},
		{"text with preview_url", `{"type":"text","text":{"body":"https://ordo.dev","preview_url":true}}`, ""},
		{"text of 4096 characters", `{"type":"text","text":{"body":"` + s4096 + `"}}`, ""},
		{"text missing", `{"type":"text"}`, "text: required"},
		{"text body missing", `{"type":"text","text":{}}`, "text.body: required"},
		{"text body empty", `{"type":"text","text":{"body":""}}`, "text.body: must not be empty"},
		{"text body too long", `{"type":"text","text":{"body":"` + s4097 + `"}}`, "text.body: longer than 4096 characters"},
		{"text body a number", `{"type":"text","text":{"body":42}}`, "text.body: must be a string"},
		{"preview_url a string", `{"type":"text","text":{"body":"hi","preview_url":"yes"}}`, "text.preview_url: must be true or false"},
		{"text unknown field", `{"type":"text","text":{"body":"hi","bold":true}}`, "text.bold: not allowed"},

		// media
		{"image by id", `{"type":"image","image":{"id":"1234567890"}}`, ""},
		{"image by link with caption", `{"type":"image","image":{"link":"https://example.com/a.jpg","caption":"` + s1024 + `"}}`, ""},
		{"image caption too long", `{"type":"image","image":{"id":"1","caption":"` + s1025 + `"}}`, "image.caption: longer than 1024 characters"},
		{"image neither id nor link", `{"type":"image","image":{"caption":"hi"}}`, "image: needs an id (uploaded media) or a link (a public https URL)"},
		{"image both id and link", `{"type":"image","image":{"id":"1","link":"https://example.com/a.jpg"}}`, "image: takes an id or a link, not both: drop one"},
		{"image link not http", `{"type":"image","image":{"link":"file:///etc/passwd"}}`, "image.link: must be an http or https URL"},
		{"image missing", `{"type":"image"}`, "image: required"},
		{"video by link", `{"type":"video","video":{"link":"http://example.com/a.mp4","caption":"clip"}}`, ""},
		{"video id empty", `{"type":"video","video":{"id":""}}`, "video.id: must not be empty"},
		{"audio by id", `{"type":"audio","audio":{"id":"99"}}`, ""},
		{"audio with a caption", `{"type":"audio","audio":{"id":"99","caption":"song"}}`, "audio.caption: not allowed"},
		{"document with filename", `{"type":"document","document":{"link":"https://example.com/a.pdf","filename":"a.pdf","caption":"invoice"}}`, ""},
		{"document as an array", `{"type":"document","document":[]}`, "document: must be an object"},
		{"sticker by id", `{"type":"sticker","sticker":{"id":"42"}}`, ""},
		{"sticker by link", `{"type":"sticker","sticker":{"link":"https://example.com/s.webp"}}`, ""},
		{"sticker with a caption", `{"type":"sticker","sticker":{"id":"42","caption":"x"}}`, "sticker.caption: not allowed"},

		// location
		{"location with numbers", `{"type":"location","location":{"latitude":37.48,"longitude":-122.14,"name":"Meta HQ","address":"1 Hacker Way"}}`, ""},
		{"location with strings", `{"type":"location","location":{"latitude":"-90","longitude":"180.0"}}`, ""},
		{"location latitude beyond 90", `{"type":"location","location":{"latitude":90.5,"longitude":0}}`, "location.latitude: must be a latitude from -90 to 90"},
		{"location longitude text", `{"type":"location","location":{"latitude":0,"longitude":"east"}}`, "location.longitude: must be a longitude from -180 to 180"},
		{"location longitude missing", `{"type":"location","location":{"latitude":0}}`, "location.longitude: required"},

		// reaction
		{"reaction", `{"type":"reaction","reaction":{"message_id":"wamid.X","emoji":"\ud83d\udc4d"}}`, ""},
		{"reaction removed", `{"type":"reaction","reaction":{"message_id":"wamid.X","emoji":""}}`, ""},
		{"reaction without message_id", `{"type":"reaction","reaction":{"emoji":"x"}}`, "reaction.message_id: required"},
		{"reaction emoji a number", `{"type":"reaction","reaction":{"message_id":"wamid.X","emoji":1}}`, "reaction.emoji: must be a string"},

		// contacts
		{"contacts", `{"type":"contacts","contacts":[{"name":{"formatted_name":"Ada Lovelace","first_name":"Ada"},"phones":[{"phone":"+1 650 555 1234","type":"WORK","wa_id":"16505551234"}],"emails":[{"email":"ada@example.com"}],"birthday":"1815-12-10","org":{"company":"Analytical"},"urls":[{"url":"https://example.com"}],"addresses":[{"city":"London"}]}]}`, ""},
		{"contacts empty", `{"type":"contacts","contacts":[]}`, "contacts: must not be empty"},
		{"contacts as an object", `{"type":"contacts","contacts":{"name":{"formatted_name":"Ada"}}}`, "contacts: must be an array"},
		{"contacts 258", `{"type":"contacts","contacts":[` + strings.TrimSuffix(strings.Repeat(`{"name":{"formatted_name":"A"}},`, 258), ",") + `]}`, "contacts: more than 257 items"},
		{"contact without formatted_name", `{"type":"contacts","contacts":[{"name":{"first_name":"Ada"}}]}`, "contacts[0].name.formatted_name: required"},
		{"contact birthday wrong", `{"type":"contacts","contacts":[{"name":{"formatted_name":"Ada"},"birthday":"10/12/1815"}]}`, "contacts[0].birthday: must be a date YYYY-MM-DD"},
		{"contact phone missing", `{"type":"contacts","contacts":[{"name":{"formatted_name":"Ada"},"phones":[{"type":"WORK"}]}]}`, "contacts[0].phones[0].phone: required"},

		// template
		{"template bare", `{"type":"template","template":{"name":"hello_world","language":{"code":"en_US"}}}`, ""},
		{"template with components", `{"type":"template","template":{"name":"order","language":{"code":"en","policy":"deterministic"},"components":[
			{"type":"header","parameters":[{"type":"image","image":{"link":"https://example.com/h.jpg"}}]},
			{"type":"body","parameters":[{"type":"text","text":"Ada"},{"type":"currency","currency":{"fallback_value":"$100","code":"USD","amount_1000":100000}},{"type":"date_time","date_time":{"fallback_value":"Today"}},{"type":"text","parameter_name":"order","text":"#7"}]},
			{"type":"button","sub_type":"quick_reply","index":"0","parameters":[{"type":"payload","payload":"DETAILS"}]},
			{"type":"button","sub_type":"url","index":1,"parameters":[{"type":"text","text":"track/7"}]}]}}`, ""},
		{"template name missing", `{"type":"template","template":{"language":{"code":"en"}}}`, "template.name: required"},
		{"template language a string", `{"type":"template","template":{"name":"x","language":"en"}}`, "template.language: must be an object"},
		{"template language policy", `{"type":"template","template":{"name":"x","language":{"code":"en","policy":"fallback"}}}`, "template.language.policy: must be deterministic"},
		{"template component type", `{"type":"template","template":{"name":"x","language":{"code":"en"},"components":[{"type":"footer"}]}}`, "template.components[0].type: must be one of header, body, button, carousel, limited_time_offer"},
		{"template button without index", `{"type":"template","template":{"name":"x","language":{"code":"en"},"components":[{"type":"button","sub_type":"quick_reply","parameters":[{"type":"payload","payload":"p"}]}]}}`, "template.components[0].index: required"},
		{"template button index 10", `{"type":"template","template":{"name":"x","language":{"code":"en"},"components":[{"type":"button","sub_type":"url","index":"10","parameters":[{"type":"text","text":"a"}]}]}}`, "template.components[0].index: must be a button position from 0 to 9"},
		{"template text parameter without text", `{"type":"template","template":{"name":"x","language":{"code":"en"},"components":[{"type":"body","parameters":[{"type":"text"}]}]}}`, "template.components[0].parameters[0].text: required"},
		{"template currency amount not whole", `{"type":"template","template":{"name":"x","language":{"code":"en"},"components":[{"type":"body","parameters":[{"type":"currency","currency":{"fallback_value":"$1","code":"USD","amount_1000":1.5}}]}]}}`, "template.components[0].parameters[0].currency.amount_1000: must be a whole number"},
		{"template header image both id and link", `{"type":"template","template":{"name":"x","language":{"code":"en"},"components":[{"type":"header","parameters":[{"type":"image","image":{"id":"1","link":"https://example.com/a.jpg"}}]}]}}`, "template.components[0].parameters[0].image: takes an id or a link, not both: drop one"},

		// interactive: button
		{"buttons", interactive(`{"type":"button","header":{"type":"image","image":{"id":"1"}},"body":{"text":"Pick"},"footer":{"text":"` + s60 + `"},"action":{"buttons":[` + button("a", s20) + `,` + button("b", "B") + `,` + button("c", "C") + `]}}`), ""},
		{"buttons body missing", interactive(`{"type":"button","action":{"buttons":[` + button("a", "A") + `]}}`), "interactive.body: required"},
		{"buttons four", interactive(`{"type":"button","body":{"text":"Pick"},"action":{"buttons":[` + button("a", "A") + `,` + button("b", "B") + `,` + button("c", "C") + `,` + button("d", "D") + `]}}`), "interactive.action.buttons: more than 3 items"},
		{"buttons none", interactive(`{"type":"button","body":{"text":"Pick"},"action":{"buttons":[]}}`), "interactive.action.buttons: must not be empty"},
		{"button title too long", interactive(`{"type":"button","body":{"text":"Pick"},"action":{"buttons":[` + button("a", "A") + `,` + button("b", s21) + `]}}`), "interactive.action.buttons[1].reply.title: longer than 20 characters"},
		{"button type not reply", interactive(`{"type":"button","body":{"text":"Pick"},"action":{"buttons":[{"type":"url","reply":{"id":"a","title":"A"}}]}}`), "interactive.action.buttons[0].type: must be reply"},
		{"button ids repeat", interactive(`{"type":"button","body":{"text":"Pick"},"action":{"buttons":[` + button("a", "A") + `,` + button("a", "B") + `]}}`), "interactive.action.buttons[1].reply.id: same as buttons[0]; button ids must differ"},
		{"button titles repeat", interactive(`{"type":"button","body":{"text":"Pick"},"action":{"buttons":[` + button("a", "Yes") + `,` + button("b", "Yes") + `]}}`), "interactive.action.buttons[1].reply.title: same as buttons[0]; button titles must differ"},
		{"interactive body too long", interactive(`{"type":"button","body":{"text":"` + s1025 + `"},"action":{"buttons":[` + button("a", "A") + `]}}`), "interactive.body.text: longer than 1024 characters"},
		{"interactive footer too long", interactive(`{"type":"button","body":{"text":"x"},"footer":{"text":"` + s61 + `"},"action":{"buttons":[` + button("a", "A") + `]}}`), "interactive.footer.text: longer than 60 characters"},
		{"interactive header text too long", interactive(`{"type":"button","header":{"type":"text","text":"` + s61 + `"},"body":{"text":"x"},"action":{"buttons":[` + button("a", "A") + `]}}`), "interactive.header.text: longer than 60 characters"},
		{"interactive header video missing", interactive(`{"type":"button","header":{"type":"video"},"body":{"text":"x"},"action":{"buttons":[` + button("a", "A") + `]}}`), "interactive.header.video: required"},
		{"interactive type unknown", interactive(`{"type":"carousel","action":{}}`), ""},
		{"interactive type unknown, bad envelope", `{"type":"interactive","interactive":{"type":"carousel"},"context":{}}`, "context.message_id: required"},
		{"interactive type not a string", interactive(`{"type":7,"action":{}}`), "interactive.type: must be one of button, list, cta_url, flow, product, product_list, catalog_message, location_request_message, call_permission_request, voice_call, order_details, order_status"},
		{"order_status with an unknown status", interactive(`{"type":"order_status","body":{"text":"x"},"action":{"name":"review_order","parameters":{"reference_id":"r","order":{"status":"lost"}}}}`), "interactive.action.parameters.order.status: must be one of pending, processing, partially-shipped, shipped, completed, canceled"},
		{"order_details without its order", interactive(`{"type":"order_details","body":{"text":"x"},"action":{"name":"review_and_pay","parameters":{"reference_id":"r","currency":"INR","total_amount":{"value":1,"offset":100}}}}`), "interactive.action.parameters.order: required"},
		{"interactive action missing", interactive(`{"type":"button","body":{"text":"x"}}`), "interactive.action: required"},

		// interactive: list
		{"list", interactive(`{"type":"list","header":{"type":"text","text":"Menu"},"body":{"text":"Choose"},"action":{"button":"Open","sections":[{"title":"Drinks","rows":` + rows("d", 5) + `},{"title":"Food","rows":[{"id":"f1","title":"Soup","description":"Hot"}]}]}}`), ""},
		{"list one section without title", interactive(`{"type":"list","body":{"text":"Choose"},"action":{"button":"Open","sections":[{"rows":` + rows("r", 10) + `}]}}`), ""},
		{"list two sections, one untitled", interactive(`{"type":"list","body":{"text":"Choose"},"action":{"button":"Open","sections":[{"title":"A","rows":` + rows("a", 1) + `},{"rows":` + rows("b", 1) + `}]}}`), "interactive.action.sections[1].title: required"},
		{"list eleven rows in one section", interactive(`{"type":"list","body":{"text":"Choose"},"action":{"button":"Open","sections":[{"rows":` + rows("r", 11) + `}]}}`), "interactive.action.sections[0].rows: more than 10 items"},
		{"list eleven rows in all", interactive(`{"type":"list","body":{"text":"Choose"},"action":{"button":"Open","sections":[{"title":"A","rows":` + rows("a", 6) + `},{"title":"B","rows":` + rows("b", 5) + `}]}}`), "interactive.action.sections: more than 10 rows in all sections"},
		{"list row ids repeat across sections", interactive(`{"type":"list","body":{"text":"Choose"},"action":{"button":"Open","sections":[{"title":"A","rows":` + rows("x", 2) + `},{"title":"B","rows":` + rows("x", 1) + `}]}}`), "interactive.action.sections[1].rows[0].id: same as sections[0].rows[0]; row ids must differ"},
		{"list button too long", interactive(`{"type":"list","body":{"text":"Choose"},"action":{"button":"` + s21 + `","sections":[{"rows":` + rows("r", 1) + `}]}}`), "interactive.action.button: longer than 20 characters"},
		{"list row title too long", interactive(`{"type":"list","body":{"text":"Choose"},"action":{"button":"Open","sections":[{"rows":[{"id":"1","title":"` + strings.Repeat("t", 25) + `"}]}]}}`), "interactive.action.sections[0].rows[0].title: longer than 24 characters"},
		{"list row description too long", interactive(`{"type":"list","body":{"text":"Choose"},"action":{"button":"Open","sections":[{"rows":[{"id":"1","title":"t","description":"` + strings.Repeat("d", 73) + `"}]}]}}`), "interactive.action.sections[0].rows[0].description: longer than 72 characters"},
		{"list with an image header", interactive(`{"type":"list","header":{"type":"image","image":{"id":"1"}},"body":{"text":"Choose"},"action":{"button":"Open","sections":[{"rows":` + rows("r", 1) + `}]}}`), "interactive.header.type: must be text"},
		{"list body of 4096 characters", interactive(`{"type":"list","body":{"text":"` + s4096 + `"},"action":{"button":"Open","sections":[{"rows":` + rows("r", 1) + `}]}}`), ""},
		{"list body too long", interactive(`{"type":"list","body":{"text":"` + s4097 + `"},"action":{"button":"Open","sections":[{"rows":` + rows("r", 1) + `}]}}`), "interactive.body.text: longer than 4096 characters"},
		{"product body too long", interactive(`{"type":"product","body":{"text":"` + s1025 + `"},"action":{"catalog_id":"c1","product_retailer_id":"sku-1"}}`), "interactive.body.text: longer than 1024 characters"},
		{"list with buttons instead", interactive(`{"type":"list","body":{"text":"Choose"},"action":{"buttons":[` + button("a", "A") + `]}}`), "interactive.action.button: required"},

		// interactive: cta_url, flow, product, others
		{"cta_url", interactive(`{"type":"cta_url","header":{"type":"text","text":"Offer"},"body":{"text":"See it"},"action":{"name":"cta_url","parameters":{"display_text":"Open","url":"https://example.com/o?id=1"}}}`), ""},
		{"cta_url display_text too long", interactive(`{"type":"cta_url","body":{"text":"See it"},"action":{"name":"cta_url","parameters":{"display_text":"` + s21 + `","url":"https://example.com"}}}`), "interactive.action.parameters.display_text: longer than 20 characters"},
		{"cta_url url not http", interactive(`{"type":"cta_url","body":{"text":"See it"},"action":{"name":"cta_url","parameters":{"display_text":"Go","url":"javascript:alert(1)"}}}`), "interactive.action.parameters.url: must be an http or https URL"},
		{"cta_url wrong action name", interactive(`{"type":"cta_url","body":{"text":"See it"},"action":{"name":"url","parameters":{"display_text":"Go","url":"https://example.com"}}}`), "interactive.action.name: must be cta_url"},
		{"flow", interactive(`{"type":"flow","body":{"text":"Sign up"},"action":{"name":"flow","parameters":{"flow_message_version":"3","flow_id":"123","flow_cta":"Sign up","flow_token":"t","flow_action":"navigate","flow_action_payload":{"screen":"WELCOME","data":{"a":1}}}}}`), ""},
		{"flow id and name", interactive(`{"type":"flow","body":{"text":"Sign up"},"action":{"name":"flow","parameters":{"flow_message_version":"3","flow_id":"1","flow_name":"n","flow_cta":"Go"}}}`), "interactive.action.parameters: takes a flow_id or a flow_name, not both: drop one"},
		{"flow version", interactive(`{"type":"flow","body":{"text":"Sign up"},"action":{"name":"flow","parameters":{"flow_message_version":"2","flow_id":"1","flow_cta":"Go"}}}`), "interactive.action.parameters.flow_message_version: must be 3"},
		{"product", interactive(`{"type":"product","body":{"text":"Look"},"action":{"catalog_id":"c1","product_retailer_id":"sku-1"}}`), ""},
		{"product with a header", interactive(`{"type":"product","header":{"type":"text","text":"No"},"action":{"catalog_id":"c1","product_retailer_id":"sku-1"}}`), "interactive.header: not allowed in a product message"},
		{"product_list", interactive(`{"type":"product_list","header":{"type":"text","text":"Shop"},"body":{"text":"Pick"},"action":{"catalog_id":"c1","sections":[{"title":"All","product_items":` + products(3) + `}]}}`), ""},
		{"product_list without header", interactive(`{"type":"product_list","body":{"text":"Pick"},"action":{"catalog_id":"c1","sections":[{"title":"All","product_items":` + products(3) + `}]}}`), "interactive.header: required"},
		{"product_list 31 products", interactive(`{"type":"product_list","header":{"type":"text","text":"Shop"},"body":{"text":"Pick"},"action":{"catalog_id":"c1","sections":[{"title":"A","product_items":` + products(20) + `},{"title":"B","product_items":` + products(11) + `}]}}`), "interactive.action.sections: more than 30 products in all sections"},
		{"catalog_message", interactive(`{"type":"catalog_message","body":{"text":"Browse"},"action":{"name":"catalog_message","parameters":{"thumbnail_product_retailer_id":"sku-1"}}}`), ""},
		{"location request", interactive(`{"type":"location_request_message","body":{"text":"Where are you?"},"action":{"name":"send_location"}}`), ""},
		{"location request wrong name", interactive(`{"type":"location_request_message","body":{"text":"Where are you?"},"action":{"name":"location"}}`), "interactive.action.name: must be send_location"},
		{"call permission request", interactive(`{"type":"call_permission_request","body":{"text":"May we call?"},"action":{"name":"call_permission_request"}}`), ""},
		{"voice call", interactive(`{"type":"voice_call","body":{"text":"Call us"},"action":{"name":"voice_call","parameters":{"display_text":"Call","ttl_minutes":60}}}`), ""},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		if seen[tt.name] {
			t.Fatalf("two cases named %q", tt.name)
		}
		seen[tt.name] = true
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateMessage([]byte(tt.msg))
			got := ""
			if err != nil {
				got = err.Error()
				if !IsInvalidMessage(err) {
					t.Errorf("error %v is not a *MessageError", err)
				}
			}
			if got != tt.want {
				t.Errorf("ValidateMessage(%.120s)\n got %q\nwant %q", tt.msg, got, tt.want)
			}
		})
	}
	if len(tests) < 60 {
		t.Errorf("%d cases; the table is meant to cover every type valid and invalid", len(tests))
	}
}

// Every message type has at least one valid case in testdata/messages, and
// each of them passes.
func TestValidateMessageExamples(t *testing.T) {
	t.Parallel()
	for _, typ := range MessageTypes() {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			raw := readExample(t, typ)
			if err := ValidateMessage(raw); err != nil {
				t.Fatalf("%s example refused: %v", typ, err)
			}
		})
	}
}

// The answer is the same every time for a message with several problems.
func TestValidateMessageDeterministic(t *testing.T) {
	t.Parallel()
	msg := []byte(`{"type":"text","text":{"body":"","preview_url":"x","z":1},"a":1,"b":2,"image":{"id":"1"}}`)
	want := ValidateMessage(msg).Error()
	if want != "a: not allowed" {
		t.Errorf("first problem %q, want the outermost one", want)
	}
	for range 50 {
		if got := ValidateMessage(msg).Error(); got != want {
			t.Fatalf("got %q after %q", got, want)
		}
	}
}

// Errors are ordo's words: no schema locations, no Go or library names.
func TestValidateMessageWording(t *testing.T) {
	t.Parallel()
	msgs := []string{
		`{"type":"image","image":{"id":1,"link":2,"x":3}}`,
		`{"type":"interactive","interactive":{"type":"flow","body":{"text":"x"},"action":{"name":"flow","parameters":{}}}}`,
		`{"type":"location","location":{"latitude":null,"longitude":[]}}`,
		`{"type":"template","template":{"name":1,"language":{"code":[]},"components":[{"type":"button","index":true}]}}`,
	}
	for _, m := range msgs {
		err := ValidateMessage([]byte(m))
		if err == nil {
			t.Fatalf("%s accepted", m)
		}
		for _, bad := range []string{"$defs", "#/", "jsonschema", "kind.", "map[", "[]interface", "got ", "want ", "\n"} {
			if strings.Contains(err.Error(), bad) {
				t.Errorf("%s: error %q contains %q", m, err, bad)
			}
		}
	}
}

// Every anyOf, oneOf and not in the schema says in its own x-message what
// it wants: otherwise the error would list the branches' failures, which
// read as contradictions ("id: required; link: required").
func TestMessageSchemaCombinatorsWorded(t *testing.T) {
	t.Parallel()
	var doc any
	if err := json.Unmarshal(messageSchemaJSON, &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch v := v.(type) {
		case map[string]any:
			for _, k := range []string{"anyOf", "oneOf", "not"} {
				if _, ok := v[k]; ok {
					if _, ok := v["x-message"]; !ok {
						t.Errorf("%s has %s but no x-message", at, k)
					}
				}
			}
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				walk(v[k], at+"/"+k)
			}
		case []any:
			for i, e := range v {
				walk(e, at+"/"+strconv.Itoa(i))
			}
		}
	}
	walk(doc, "#")
	if got := len(MessageTypes()); got != 11 {
		t.Errorf("%d message types, want 11", got)
	}
}
