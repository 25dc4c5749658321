package whatsapp

import (
	"fmt"
	"strconv"
)

// The rules of an outbound message that JSON Schema cannot say: they relate
// two places of the message (the type and a sibling object, ids that must
// differ, totals across sections). The schema has already checked shapes,
// so these read the message loosely and say nothing about what is not there.

const (
	// maxListRows is Meta's limit on rows across all sections of a list.
	maxListRows = 10
	// maxProductItems is Meta's limit on products across all sections of a
	// product_list.
	maxProductItems = 30
)

func (s *messageSchema) crossChecks(v any) []problem {
	var found []problem
	add := func(rule string, path ...string) {
		found = append(found, problem{path: path, rule: rule, rank: rankOther})
	}
	msg, _ := v.(map[string]any)
	typ, _ := msg["type"].(string)
	known := false
	for _, t := range s.types {
		known = known || t == typ
	}
	if !known {
		return nil
	}
	// Each type's object is allowed at the top, but only the message's own:
	// {"type":"text","text":…,"image":…} is a mistake, not two messages.
	for _, t := range s.types {
		if _, ok := msg[t]; ok && t != typ {
			add("not allowed when type is "+typ, t)
		}
	}
	interactive, _ := msg["interactive"].(map[string]any)
	if typ != "interactive" || interactive == nil {
		return found
	}
	action, _ := interactive["action"].(map[string]any)
	switch interactive["type"] {
	case "button":
		buttons, _ := action["buttons"].([]any)
		ids, titles := map[string]int{}, map[string]int{}
		for i, b := range buttons {
			b, _ := b.(map[string]any)
			reply, _ := b["reply"].(map[string]any)
			at := []string{"interactive", "action", "buttons", strconv.Itoa(i), "reply"}
			if j, dup := unique(ids, reply["id"], i); dup {
				add(fmt.Sprintf("same as buttons[%d]; button ids must differ", j), append(at, "id")...)
			}
			if j, dup := unique(titles, reply["title"], i); dup {
				add(fmt.Sprintf("same as buttons[%d]; button titles must differ", j), append(at, "title")...)
			}
		}
	case "list":
		sections, _ := action["sections"].([]any)
		ids := map[string]int{}
		where := map[int]string{}
		total, biggest := 0, 0
		for i, sec := range sections {
			sec, _ := sec.(map[string]any)
			rows, _ := sec["rows"].([]any)
			biggest = max(biggest, len(rows))
			for j, r := range rows {
				r, _ := r.(map[string]any)
				where[total] = fmt.Sprintf("sections[%d].rows[%d]", i, j)
				if k, dup := unique(ids, r["id"], total); dup {
					add("same as "+where[k]+"; row ids must differ",
						"interactive", "action", "sections", strconv.Itoa(i), "rows", strconv.Itoa(j), "id")
				}
				total++
			}
		}
		// A section over the limit on its own is the schema's to name.
		if total > maxListRows && biggest <= maxListRows {
			add(fmt.Sprintf("more than %d rows in all sections", maxListRows), "interactive", "action", "sections")
		}
	case "product_list":
		sections, _ := action["sections"].([]any)
		total, biggest := 0, 0
		for _, sec := range sections {
			sec, _ := sec.(map[string]any)
			items, _ := sec["product_items"].([]any)
			total += len(items)
			biggest = max(biggest, len(items))
		}
		if total > maxProductItems && biggest <= maxProductItems {
			add(fmt.Sprintf("more than %d products in all sections", maxProductItems), "interactive", "action", "sections")
		}
	}
	return found
}

// unique records v (when it is a string) as seen at position i and, when it
// was seen before, returns the earlier position.
func unique(seen map[string]int, v any, i int) (int, bool) {
	s, ok := v.(string)
	if !ok {
		return 0, false
	}
	if j, dup := seen[s]; dup {
		return j, true
	}
	seen[s] = i
	return 0, false
}
