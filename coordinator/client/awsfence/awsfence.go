// Package awsfence adds the fencing token to requests of aws-sdk-go-v2
// clients, so that workers keep their own S3 SDK and only point it at the
// gateway:
//
//	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
//		o.BaseEndpoint = aws.String("http://fencegate:8080")
//		o.UsePathStyle = true
//	}, awsfence.WithToken(lease.Token))
//
// The header is added in the Build step, before the request is signed, so
// the worker's signature covers the token too.
package awsfence

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Header is the header the gateway reads the token from (its default
// token_header).
const Header = "Fencing-Token"

// WithToken returns an s3.Options function that sends token() in the
// Fencing-Token header of every request. token is called per request (and
// per retry), so it can follow a lease as it is renewed or re-acquired; a
// token of 0 sends no header (the gateway answers writes with
// missing_fencing_token).
func WithToken(token func() int64) func(*s3.Options) {
	return func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, Middleware(Header, token))
	}
}

// Middleware is the same for any aws-sdk-go-v2 client (its APIOptions, or
// aws.Config.APIOptions), with a configurable header name.
func Middleware(header string, token func() int64) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
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

// Fixed returns a token function for a token that does not change.
func Fixed(token int64) func() int64 { return func() int64 { return token } }
