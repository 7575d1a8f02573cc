package azure

import (
	"encoding/xml"
	"net/http"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/httprefusal"
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

// WriteError implements gateway.ErrorWriter: refusals in the Blob
// service's XML error format, with fencegate's code (stale_fencing_token,
// ...) as the error code.
func (u *Upstream) WriteError(w http.ResponseWriter, r *http.Request, e *fencegate.Error) {
	w.Header().Set("X-Ms-Error-Code", e.Code)
	httprefusal.WriteHeader(w, e, "application/xml")
	if r.Method == http.MethodHead {
		return
	}
	b, _ := xml.Marshal(xmlError{Code: e.Code, Message: e.Message, Resource: e.Resource,
		Token: e.Token, Highest: e.Highest, Route: e.Route, Owner: e.Owner})
	w.Write([]byte(xml.Header))
	w.Write(b)
}
