package whatsapp

import (
	"cmp"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// DeliveryFailure is what a failed status says went wrong: Meta took the
// message and could not deliver it. It never went out, so it is classed
// like the same error answered to a send, except that "outcome unknown"
// (131000, …) means "not delivered" here and is retried.
type DeliveryFailure struct {
	Code    int    // error.code; NoCode when Meta gave none
	Message string // "131026 Message undeliverable", for the error history
	Class   Class
}

// Failure reads a failed status's errors[0]; ok is false for any other
// status.
func (s Status) Failure() (f DeliveryFailure, ok bool) {
	if s.Status != "failed" {
		return f, false
	}
	var errs []struct {
		Code    *int   `json:"code"`
		Title   string `json:"title"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(s.Errors, &errs)
	f.Code, f.Message = NoCode, "delivery failed"
	if len(errs) > 0 {
		if errs[0].Code != nil {
			f.Code = *errs[0].Code
		}
		text := cmp.Or(errs[0].Title, errs[0].Message)
		if f.Code != NoCode {
			text = strings.TrimSpace(strconv.Itoa(f.Code) + " " + text)
		}
		f.Message = "delivery failed: " + cmp.Or(text, "no reason given")
	}
	f.Class = Classify(http.StatusBadRequest, f.Code)
	if f.Code == NoCode || f.Class == Ambiguous {
		f.Class = Retry
	}
	return f, true
}
