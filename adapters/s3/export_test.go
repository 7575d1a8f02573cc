package s3

import (
	"context"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// UseSDKSigner makes u sign its forwards with aws-sdk-go-v2's v4.Signer
// (as S3 clients configure it: no second escaping of the path) instead of
// the hand-written upstreamSigner, for the side-by-side benchmark.
func UseSDKSigner(u *Upstream) {
	sdk := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	u.sign = func(req *http.Request, creds aws.Credentials, payload string, now time.Time) {
		if err := sdk.SignHTTP(context.Background(), creds, req, payload, "s3", u.region, now); err != nil {
			panic(err)
		}
	}
}
