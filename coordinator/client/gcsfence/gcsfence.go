// Package gcsfence points Google Cloud Storage clients at fencegate's GCS
// route: one client option adds the worker's key and its fencing token to
// every request, and Stale turns the gateway's stale_fencing_token refusal
// into a *client.StaleError:
//
//	gc, err := storage.NewClient(ctx,
//		option.WithEndpoint("http://fencegate:8080/storage/v1/"),
//		gcsfence.WithToken(workerKey, func() int64 { return lease.Token }))
//	w := gc.Bucket("invoices").Object("2026/11.csv").NewWriter(ctx)
//	...
//	if stale, ok := gcsfence.Stale(w.Close()); ok { /* a newer owner exists: stop, do not retry */ }
//
// The worker's key is one of the route's auth.api_keys; the gateway talks
// to the store with credentials of its own.
package gcsfence

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/coordinator/client"
)

// WithToken returns a client option (for storage.NewClient, or any client
// of Google's API libraries) whose requests carry Authorization: Bearer key
// and token() in the Fencing-Token header. token is called per request, so
// it can follow a lease as it is renewed; 0 sends no header. It replaces
// the client's HTTP client, and with it Google's credentials, which a
// worker behind the gateway does not hold.
func WithToken(key string, token func() int64) option.ClientOption {
	return option.WithHTTPClient(&http.Client{Transport: Transport(nil, fencegate.DefaultTokenHeader, key, token)})
}

// Transport is WithToken's RoundTripper over next (nil:
// http.DefaultTransport), with a configurable token header.
func Transport(next http.RoundTripper, header, key string, token func() int64) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &transport{next: next, header: header, key: key, token: token}
}

type transport struct {
	next   http.RoundTripper
	header string
	key    string
	token  func() int64
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	// A RoundTripper must not modify the request it was given.
	out := req.Clone(req.Context())
	if t.key != "" {
		out.Header.Set("Authorization", "Bearer "+t.key)
	}
	if tok := t.token(); tok > 0 {
		out.Header.Set(t.header, strconv.FormatInt(tok, 10))
	} else {
		out.Header.Del(t.header)
	}
	return t.next.RoundTrip(out)
}

// Stale reports whether err is the gateway's stale_fencing_token refusal,
// and returns it as a *client.StaleError.
func Stale(err error) (*client.StaleError, bool) {
	var ge *googleapi.Error
	if !errors.As(err, &ge) || ge.Code != http.StatusConflict {
		return nil, false
	}
	stale := false
	for _, e := range ge.Errors {
		stale = stale || e.Reason == fencegate.CodeStaleToken
	}
	if !stale {
		return nil, false
	}
	se := &client.StaleError{Message: ge.Message}
	var doc struct {
		Error struct {
			Details []struct {
				Type     string `json:"@type"`
				Resource string `json:"resource"`
				Token    int64  `json:"token"`
				Highest  int64  `json:"highest"`
				Route    string `json:"route"`
			} `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(ge.Body), &doc) == nil {
		for _, d := range doc.Error.Details {
			if d.Type == "type.fencegate.dev/Refusal" {
				se.Resource, se.Token, se.Highest, se.Route = d.Resource, d.Token, d.Highest, d.Route
			}
		}
	}
	return se, true
}
