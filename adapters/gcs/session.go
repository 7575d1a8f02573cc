package gcs

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/httprefusal"
	"github.com/fencegate/fencegate/resource"
)

// sessionParam is the query parameter the gateway adds to the session URL
// of a resumable upload it opened: the token that opened the session and a
// MAC binding it to the session's bucket, object and upload id.
const sessionParam = "fencegate_session"

// session is a resumable upload session as the gateway handed it out.
type session struct {
	bucket, object, uploadID string
	token                    int64
	mac                      string
}

// parseSession reads the session binding of a request on an open session.
// The MAC is checked by the upstream (verify), which has the key.
func parseSession(q resource.Query) (*session, *fencegate.Error) {
	v := q.Get(sessionParam)
	tok, mac, ok := strings.Cut(v, ".")
	t, err := strconv.ParseInt(tok, 10, 64)
	if !ok || err != nil || t <= 0 {
		return nil, errUnknownSession()
	}
	return &session{object: q.Get("name"), uploadID: q.Get("upload_id"), token: t, mac: mac}, nil
}

func errUnknownSession() *fencegate.Error {
	return httprefusal.WithStatus(http.StatusNotFound, &fencegate.Error{Code: fencegate.CodeInvalidRequest,
		Message: "not an upload session this gateway opened (or opened by another gateway process without the same gcs.session_key): start the upload again"})
}

// sign computes a session's MAC.
func (u *Upstream) sign(s *session) string {
	m := hmac.New(sha256.New, u.sessionKey)
	for _, f := range []string{s.bucket, s.object, s.uploadID, strconv.FormatInt(s.token, 10)} {
		m.Write([]byte(f))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// verify checks a session binding; bucket is the request path's.
func (u *Upstream) verify(s *session, bucket string) bool {
	s.bucket = bucket
	return s.uploadID != "" && s.object != "" && hmac.Equal([]byte(u.sign(s)), []byte(s.mac))
}

// sessionURL turns the session URL the store answered (on its own address)
// into the gateway's: the worker's chunks must come through the gateway,
// which fences each of them with the object and token that opened the
// session. in is the worker's request, whose Host is the gateway's
// address as the worker knows it.
func (u *Upstream) sessionURL(in *http.Request, f *forward, loc string) (string, bool) {
	l, err := url.Parse(loc)
	if err != nil {
		return "", false
	}
	q, err := url.ParseQuery(l.RawQuery)
	if err != nil || len(q["upload_id"]) != 1 || q.Get("upload_id") == "" {
		return "", false
	}
	s := &session{bucket: f.State.target.bucket, object: f.State.target.object, uploadID: q.Get("upload_id"), token: f.Token}
	q.Set("name", s.object)
	q.Set(sessionParam, strconv.FormatInt(s.token, 10)+"."+u.sign(s))
	out := url.URL{Scheme: "http", Host: in.Host, Path: "/upload/storage/v1/b/" + s.bucket + "/o", RawQuery: q.Encode()}
	if in.TLS != nil {
		out.Scheme = "https"
	}
	return out.String(), true
}
