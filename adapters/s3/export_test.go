package s3

// UseSDKSigner makes u sign its forwards with aws-sdk-go-v2's v4.Signer
// (as S3 clients configure it: no second escaping of the path) instead of
// the hand-written upstreamSigner, for the side-by-side benchmark.
func UseSDKSigner(u *Upstream) { u.sign = sdkSign(u.region) }
