//go:build sdksigner

package s3

// A -tags sdksigner build signs with aws-sdk-go-v2's v4.Signer: the other
// side of upstreamSigner's figure, never a shipped build.
func init() { sdkSigned = true }
