package gcs

import (
	"encoding/json"
	"net/http"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/httprefusal"
)

// jsonError is the JSON API's error document ({"error": {...}}, as the
// clients' googleapi.Error reads it), with fencegate's code as the reason
// of its one error item and the refusal's fields in a details entry.
type jsonError struct {
	Error struct {
		Code    int         `json:"code"`
		Message string      `json:"message"`
		Errors  []errorItem `json:"errors"`
		Details []details   `json:"details,omitempty"`
	} `json:"error"`
}

type errorItem struct {
	Domain  string `json:"domain"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// details carries the fields of fencegate's own JSON refusal.
type details struct {
	Type string `json:"@type"`
	Code string `json:"error"`
	objectstore.Fields
}

// DetailsType is the @type of the details entry of a refusal.
const DetailsType = "type.fencegate.dev/Refusal"

// RefusalBody is a refusal in the JSON API's error format, with
// fencegate's code (stale_fencing_token, ...) as the reason.
func (d dialect) RefusalBody(h http.Header, e *fencegate.Error) []byte {
	status := httprefusal.Status(e)
	var doc jsonError
	doc.Error.Code = status
	doc.Error.Message = e.Message
	doc.Error.Errors = []errorItem{{Domain: "fencegate", Reason: e.Code, Message: e.Message}}
	doc.Error.Details = []details{{Type: DetailsType, Code: e.Code, Fields: objectstore.FieldsOf(e)}}
	h.Set("Content-Type", "application/json; charset=UTF-8")
	b, _ := json.Marshal(doc)
	return b
}
