package s3

import (
	"encoding/xml"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/objectstore"
)

// s3Error is a refusal in S3's own vocabulary (AccessDenied,
// SignatureDoesNotMatch, ...), for the errors an S3 client must recognise
// as S3's: authentication and malformed requests. It travels inside a
// *fencegate.Error (Err) so the gateway logs and counts it by the
// fencegate code.
type s3Error struct {
	Status  int
	Code    string
	Message string
}

func (e *s3Error) Error() string { return e.Code + ": " + e.Message }

// HTTPStatus is S3's status for e (httprefusal.StatusCoder): it answers
// the refusal that carries e, whatever the fencegate code's own status.
func (e *s3Error) HTTPStatus() int { return e.Status }

// refusal wraps e into the gateway's error type.
func (e *s3Error) refusal() *fencegate.Error {
	code := fencegate.CodeInvalidRequest
	switch e.Status {
	case http.StatusForbidden:
		code = fencegate.CodeForbidden
	case http.StatusNotImplemented:
		code = fencegate.CodeInvalidRequest
	}
	return &fencegate.Error{Code: code, Message: e.Message, Err: e}
}

func errAccessDenied(msg string) *s3Error {
	return &s3Error{http.StatusForbidden, "AccessDenied", msg}
}
func errAuthMalformed(msg string) *s3Error {
	return &s3Error{http.StatusForbidden, "AuthorizationHeaderMalformed", msg}
}
func errInvalidAccessKey() *s3Error {
	return &s3Error{http.StatusForbidden, "InvalidAccessKeyId", "the access key id is not one of this gateway's clients"}
}
func errSignatureMismatch() *s3Error {
	return &s3Error{http.StatusForbidden, "SignatureDoesNotMatch", "the request signature does not match the signature computed with the client's key"}
}
func errRequestTimeTooSkewed() *s3Error {
	return &s3Error{http.StatusForbidden, "RequestTimeTooSkewed", "the difference between the request time and the gateway's time is more than 15 minutes"}
}
func errInvalidArgument(msg string) *s3Error {
	return &s3Error{http.StatusBadRequest, "InvalidArgument", msg}
}
func errInvalidRequest(msg string) *s3Error {
	return &s3Error{http.StatusBadRequest, "InvalidRequest", msg}
}
func errNotImplemented(msg string) *s3Error {
	return &s3Error{http.StatusNotImplemented, "NotImplemented", msg}
}
func errKeyTooLong() *s3Error {
	return &s3Error{http.StatusBadRequest, "KeyTooLongError", "object keys are limited to 1024 bytes"}
}
func errMalformedXML(msg string) *s3Error {
	return &s3Error{http.StatusBadRequest, "MalformedXML", msg}
}

// xmlError is the S3 error document, extended with fencegate's refusal
// fields so that an SDK's error (smithy's GenericAPIError carries Code and
// Message) names the fencing decision.
type xmlError struct {
	XMLName xml.Name `xml:"Error"`
	Code    string   `xml:"Code"`
	Message string   `xml:"Message"`
	objectstore.Fields
	Fencegate string `xml:"FencegateCode,omitempty"`
	RequestID string `xml:"RequestId"`
}

// RefusalBody is a refusal in S3's XML error format. Fencing refusals
// carry fencegate's code (<Code>stale_fencing_token</Code>); S3
// authentication and request errors carry S3's code, with fencegate's in
// <FencegateCode>.
func (d dialect) RefusalBody(h http.Header, e *fencegate.Error) []byte {
	doc := xmlError{
		Code: e.Code, Message: e.Message, Fields: objectstore.FieldsOf(e),
		RequestID: strconv.FormatInt(time.Now().UnixNano(), 36),
	}
	var se *s3Error
	if errors.As(e, &se) {
		doc.Code, doc.Fencegate = se.Code, e.Code
	}
	h.Set("Content-Type", "application/xml")
	h.Set("X-Amz-Request-Id", doc.RequestID)
	b, _ := xml.Marshal(doc)
	return append([]byte(xml.Header), b...)
}
