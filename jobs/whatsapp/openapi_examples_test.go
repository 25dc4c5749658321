package whatsapp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every request example of Meta's OpenAPI description of the send endpoint
// (testdata/openapi, see its README) is a message ordo accepts; the two
// that are not messages it accepts are refused for the reason they are not.
func TestMetaOpenAPIExamplesAccepted(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/openapi/*.json")
	if err != nil || len(files) < 45 {
		t.Fatalf("examples: %d files, %v", len(files), err)
	}
	notMessages := map[string]string{
		"Send_typing_indicator_and_read_receipt.json": "type: required",
		"Send_Reply_to_List_Message.json":             "type: required",
		"Send_Text_Message_with_Preview_URL.json":     "type: required",
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(strings.TrimSuffix(name, ".json"), func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			err = ValidateMessage(raw)
			if want, ok := notMessages[name]; ok {
				if err == nil || err.Error() != want {
					t.Fatalf("ValidateMessage = %v, want %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Meta's own example refused: %v", err)
			}
			if field, value := UnknownType(raw); field != "" {
				t.Errorf("Meta's example has %s %q, which the schema does not know", field, value)
			}
		})
	}
	if !IsReadReceipt(mustRead(t, "testdata/openapi/Send_typing_indicator_and_read_receipt.json")) {
		t.Error("Meta's read receipt example is not recognised as one")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
