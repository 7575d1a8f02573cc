//go:build sdksigner

package s3

// A build with -tags sdksigner signs the forwards with aws-sdk-go-v2's
// v4.Signer instead of upstreamSigner: the other side of the side-by-side
// figure on upstreamSigner. Never a shipped build.
func init() { sdkSigned = true }
