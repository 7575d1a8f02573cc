package azure

import (
	"encoding/xml"
	"net/http"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/objectstore"
)

// xmlError is the Blob service's error document, with fencegate's code as
// the Code (which the SDKs read, with the x-ms-error-code header, into
// their error's code) and the refusal's fields beside it.
type xmlError struct {
	XMLName xml.Name `xml:"Error"`
	Code    string   `xml:"Code"`
	Message string   `xml:"Message"`
	objectstore.Fields
}

// RefusalBody is a refusal in the Blob service's XML error format, with
// fencegate's code (stale_fencing_token, ...) as the error code.
func (d dialect) RefusalBody(h http.Header, e *fencegate.Error) []byte {
	h.Set("Content-Type", "application/xml")
	h.Set("X-Ms-Error-Code", e.Code)
	b, _ := xml.Marshal(xmlError{Code: e.Code, Message: e.Message, Fields: objectstore.FieldsOf(e)})
	return append([]byte(xml.Header), b...)
}
