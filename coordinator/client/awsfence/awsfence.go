// Package awsfence adds the fencing token to requests of aws-sdk-go-v2
// clients, so that workers keep their own S3 SDK and only point it at the
// gateway, and turns the gateway's stale_fencing_token refusal into a
// *client.StaleError:
//
//	s3c := s3.NewFromConfig(cfg, func(o *s3.Options) {
//		o.BaseEndpoint = aws.String("http://fencegate:8080")
//		o.UsePathStyle = true
//	}, awsfence.WithToken(func() int64 { return lease.Token }))
//	_, err := s3c.PutObject(ctx, in)
//	var stale *client.StaleError
//	if errors.As(err, &stale) { /* a newer owner exists: stop, do not retry */ }
//
// The header is added in the Build step, before the request is signed, so
// the worker's signature covers the token too. ExampleWithToken runs it.
package awsfence

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/coordinator/client"
)

// Header is the header the gateway reads the token from (its default
// token_header).
const Header = fencegate.DefaultTokenHeader

// WithToken returns an s3.Options function that sends token() in the
// Fencing-Token header of every request. token is called per request (and
// per retry), so it can follow a lease as it is renewed or re-acquired; a
// token of 0 sends no header (the gateway answers writes with
// missing_fencing_token). The gateway's stale_fencing_token refusal comes
// back as an error that errors.As turns into a *client.StaleError.
func WithToken(token func() int64) func(*s3.Options) {
	return func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, Middleware(Header, token))
	}
}

// Middleware is the same for any aws-sdk-go-v2 client (its APIOptions, or
// aws.Config.APIOptions), with a configurable header name: it sets the
// header and turns stale refusals into *client.StaleError.
func Middleware(header string, token func() int64) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		if err := stack.Deserialize.Add(staleWrap, middleware.Before); err != nil {
			return err
		}
		if err := stack.Deserialize.Add(staleBody, middleware.After); err != nil {
			return err
		}
		return stack.Build.Add(middleware.BuildMiddlewareFunc("FencingToken",
			func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
				req, ok := in.Request.(*smithyhttp.Request)
				if !ok {
					return middleware.BuildOutput{}, middleware.Metadata{}, fmt.Errorf("awsfence: unexpected request type %T", in.Request)
				}
				if t := token(); t > 0 {
					req.Header.Set(header, strconv.FormatInt(t, 10))
				} else {
					req.Header.Del(header)
				}
				return next.HandleBuild(ctx, in)
			}), middleware.After)
	}
}

// Stale refusals are recognised in two places of the Deserialize step:
// staleBody sits next to the transport, before the SDK's deserializer reads
// the answer, and parses a 409's S3 error document (the SDK keeps only its
// Code and Message); staleWrap, outermost, adds the *client.StaleError it
// found to the SDK's error. The SDK's error stays in the chain, so
// smithy.APIError (ErrorCode "stale_fencing_token") and
// awshttp.ResponseError keep working.
type staleSlot struct{}

var staleWrap = middleware.DeserializeMiddlewareFunc("FencingStaleError",
	func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
		var se *client.StaleError
		out, md, err := next.HandleDeserialize(context.WithValue(ctx, staleSlot{}, &se), in)
		if err != nil && se != nil {
			err = &staleError{stale: se, sdk: err}
		}
		return out, md, err
	})

var staleBody = middleware.DeserializeMiddlewareFunc("FencingStaleBody",
	func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
		out, md, err := next.HandleDeserialize(ctx, in)
		slot, _ := ctx.Value(staleSlot{}).(**client.StaleError)
		resp, ok := out.RawResponse.(*smithyhttp.Response)
		if err != nil || !ok || slot == nil || resp.StatusCode != http.StatusConflict {
			return out, md, err
		}
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, fencegate.MaxRefusalBody))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(b)) // for the SDK's deserializer
		var doc struct {
			Code     string `xml:"Code"`
			Message  string `xml:"Message"`
			Resource string `xml:"Resource"`
			Token    int64  `xml:"Token"`
			Highest  int64  `xml:"Highest"`
			Route    string `xml:"Route"`
		}
		if rerr == nil && xml.Unmarshal(b, &doc) == nil && doc.Code == fencegate.CodeStaleToken {
			*slot = &client.StaleError{Resource: doc.Resource, Token: doc.Token, Highest: doc.Highest, Route: doc.Route, Message: doc.Message}
		}
		return out, md, err
	})

// staleError is the SDK's error for a stale refusal with the
// *client.StaleError beside it; errors.As finds either.
type staleError struct {
	stale *client.StaleError
	sdk   error
}

func (e *staleError) Error() string   { return e.sdk.Error() }
func (e *staleError) Unwrap() []error { return []error{e.stale, e.sdk} }

// Fixed returns a token function for a token that does not change.
func Fixed(token int64) func() int64 { return func() int64 { return token } }
