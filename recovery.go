package fencegate

// FenceRecord is one line of a fence export (`fencegate fence export`, JSON
// lines): what a store must keep of a resource's fence for the fence to
// survive the store's loss. Importing it only ever raises a fence (I7).
type FenceRecord struct {
	Resource string `json:"resource"`
	Highest  int64  `json:"highest"`
	Owner    string `json:"owner,omitempty"`
	// ETag is the ETag of the last write the gateway made to the resource
	// (S3 and HTTP routes with `precondition: etag`), "?" if its outcome is
	// not known, "" if none.
	ETag string `json:"etag,omitempty"`
}

// ETagUnknown marks a resource whose last write through the gateway may or
// may not have been applied: the next conditional write learns the current
// validator from the upstream first (HEAD).
const ETagUnknown = "?"
