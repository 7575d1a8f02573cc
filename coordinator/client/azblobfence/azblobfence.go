// Package azblobfence points Azure Blob Storage clients (azblob) at
// fencegate's Azure route: one pipeline policy adds the fencing token to
// every request, and Stale turns the gateway's stale_fencing_token refusal
// into a *client.StaleError:
//
//	cred, _ := azblob.NewSharedKeyCredential(workerAccount, workerKey)
//	c, err := azblob.NewClientWithSharedKeyCredential("http://fencegate:8080/", cred,
//		azblobfence.ClientOptions(func() int64 { return lease.Token }))
//	_, err = c.UploadBuffer(ctx, "invoices", "2026/11.csv", data, nil)
//	if stale, ok := azblobfence.Stale(err); ok { /* a newer owner exists: stop, do not retry */ }
//
// The worker signs with Shared Key credentials of its own (one of the
// route's azure.clients); the gateway signs its forwards with the store
// account's key, which the worker does not hold.
package azblobfence

import (
	"encoding/xml"
	"errors"
	"net/http"
	"strconv"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/coordinator/client"
)

// Header is the header the gateway reads the token from (its default
// token_header).
const Header = fencegate.DefaultTokenHeader

// Policy returns a pipeline policy (for azcore.ClientOptions.PerCallPolicies
// of any azblob client) that sends token() in header. token is called once
// per operation, so the SDK's retries of it carry one token, and it can
// follow a lease as it is renewed; 0 sends no header. The header is not an
// x-ms-* header: Shared Key signatures do not cover it, and the gateway
// removes it before it forwards.
func Policy(header string, token func() int64) policy.Policy {
	return &tokenPolicy{header: header, token: token}
}

type tokenPolicy struct {
	header string
	token  func() int64
}

func (p *tokenPolicy) Do(req *policy.Request) (*http.Response, error) {
	if tok := p.token(); tok > 0 {
		req.Raw().Header.Set(p.header, strconv.FormatInt(tok, 10))
	} else {
		req.Raw().Header.Del(p.header)
	}
	return req.Next()
}

// ClientOptions returns azblob client options whose requests carry token()
// in the Fencing-Token header.
func ClientOptions(token func() int64) *azblob.ClientOptions {
	o := &azblob.ClientOptions{}
	o.PerCallPolicies = []policy.Policy{Policy(Header, token)}
	return o
}

// Stale reports whether err is the gateway's stale_fencing_token refusal,
// and returns it as a *client.StaleError.
func Stale(err error) (*client.StaleError, bool) {
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusConflict || re.ErrorCode != fencegate.CodeStaleToken {
		return nil, false
	}
	se := &client.StaleError{}
	var doc struct {
		Message  string `xml:"Message"`
		Resource string `xml:"Resource"`
		Token    int64  `xml:"Token"`
		Highest  int64  `xml:"Highest"`
		Route    string `xml:"Route"`
	}
	if re.RawResponse != nil {
		if b, err := runtime.Payload(re.RawResponse); err == nil && xml.Unmarshal(b, &doc) == nil {
			se.Message, se.Resource, se.Token, se.Highest, se.Route = doc.Message, doc.Resource, doc.Token, doc.Highest, doc.Route
		}
	}
	if se.Message == "" {
		se.Message = re.Error()
	}
	return se, true
}

// Fixed returns a token function for a token that does not change.
func Fixed(token int64) func() int64 { return func() int64 { return token } }
