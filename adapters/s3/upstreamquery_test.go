package s3

import "testing"

func TestUpstreamQueryDropsEncodedPresignParams(t *testing.T) {
	for raw, want := range map[string]string{
		"tagging=&X-Amz-%53ignature=ab&X-Amz-Date=1": "tagging=",
		"X%2DAmz-Security-Token=t&versionId=v":       "versionId=v",
		"versionId=a%2Bb":                            "versionId=a%2Bb",
		"tagging":                                    "tagging",
	} {
		if got := upstreamQuery(raw); got != want {
			t.Errorf("upstreamQuery(%q) = %q, want %q", raw, got, want)
		}
	}
}
