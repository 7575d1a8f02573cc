package azure

import (
	"encoding/xml"
	"net/http"

	"github.com/fencegate/fencegate"
)

// xmlError is the Blob service's error document, with fencegate's code as
// the Code (which the SDKs read, with the x-ms-error-code header, into
// their error's code) and the refusal's fields beside it.
type xmlError struct {
	XMLName  xml.Name `xml:"Error"`
	Code     string   `xml:"Code"`
	Message  string   `xml:"Message"`
	Resource string   `xml:"Resource,omitempty"`
	Token    int64    `xml:"Token,omitempty"`
	Highest  int64    `xml:"Highest,omitempty"`
	Route    string   `xml:"Route,omitempty"`
	Owner    string   `xml:"Owner,omitempty"`
}

// RefusalBody is a refusal in the Blob service's XML error format, with
// fencegate's code (stale_fencing_token, ...) as the error code.
func (d dialect) RefusalBody(h http.Header, e *fencegate.Error) []byte {
	h.Set("Content-Type", "application/xml")
	h.Set("X-Ms-Error-Code", e.Code)
	b, _ := xml.Marshal(xmlError{Code: e.Code, Message: e.Message, Resource: e.Resource,
		Token: e.Token, Highest: e.Highest, Route: e.Route, Owner: e.Owner})
	return append([]byte(xml.Header), b...)
}
