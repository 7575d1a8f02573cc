package config

import (
	"cmp"
	"strconv"
	"strings"
	"time"
)

// ObjectStore is a route's object-store section (s3, gcs, azure): what the
// configuration knows of every dialect (adapters/objectstore). The
// sections are registered once, in objectStoreSections; the defaults,
// template variables, timeouts and validation iterate them instead of
// switching on the kind.
type ObjectStore interface {
	// Kind is the section's name in the file ("s3").
	Kind() string
	// StoreEndpoint is the store's URL, the dialect's default filled in.
	StoreEndpoint() string
	// TemplateVar reports whether the dialect supplies the resource
	// template variable name (S3: bucket, key, key.N).
	TemplateVar(name string) bool
	// Precondition is the route's `precondition:` value that makes its
	// writes conditional on the version the gateway last wrote: what the
	// store compares ("etag", "generation").
	Precondition() string
	// CheckIn is where the gateway may write and delete a probe object
	// (the bucket or container of check_bucket, check_container; "" if
	// unset) and that field's path in the section ("s3.check_bucket").
	CheckIn() (place, field string)
	// Stamps reports whether the route writes each write's token into the
	// object's metadata (stamp: true), which `fence rebuild` reads.
	Stamps() bool
	// timeout is the section's forward timeout, for its default.
	timeout() *time.Duration
	// validate checks the section of the route at field path f.
	validate(f string, r *Route) Errors
}

// objectStoreSections are the object-store sections a route may set, in
// the order they are read; a dialect is added here (and as a field of
// Route) and nowhere else in this package.
var objectStoreSections = []struct {
	zero ObjectStore                // an empty section, for its kind
	of   func(r *Route) ObjectStore // the route's section, nil if unset
}{
	{&S3{}, func(r *Route) ObjectStore { return section(r.S3) }},
	{&GCS{}, func(r *Route) ObjectStore { return section(r.GCS) }},
	{&Azure{}, func(r *Route) ObjectStore { return section(r.Azure) }},
}

// section is p as an ObjectStore; nil (not a typed nil) if p is nil.
func section[T any, P interface {
	*T
	ObjectStore
}](p P) ObjectStore {
	if p == nil {
		return nil
	}
	return p
}

// ObjectStores are the object-store sections the route sets (one in a
// valid configuration).
func (r *Route) ObjectStores() []ObjectStore {
	var out []ObjectStore
	for _, sec := range objectStoreSections {
		if s := sec.of(r); s != nil {
			out = append(out, s)
		}
	}
	return out
}

// ObjectStore is the route's object-store section; nil if it has none.
func (r *Route) ObjectStore() ObjectStore {
	if ss := r.ObjectStores(); len(ss) > 0 {
		return ss[0]
	}
	return nil
}

// ObjectStoreKinds are the names of the object-store sections ("s3",
// "gcs", "azure"), for messages.
func ObjectStoreKinds() []string {
	var kinds []string
	for _, sec := range objectStoreSections {
		kinds = append(kinds, sec.zero.Kind())
	}
	return kinds
}

// wordList is "a, b and c" (conj "and").
func wordList(words []string, conj string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " " + conj + " " + words[len(words)-1]
}

// Kind implements ObjectStore.
func (s *S3) Kind() string { return "s3" }

// StoreEndpoint implements ObjectStore.
func (s *S3) StoreEndpoint() string { return s.Endpoint }

// TemplateVar implements ObjectStore: {bucket}, {key} and {key.N}, the
// first N segments of the object key (a key prefix).
func (s *S3) TemplateVar(name string) bool {
	if n, ok := strings.CutPrefix(name, "key."); ok {
		i, err := strconv.Atoi(n)
		return err == nil && i >= 1
	}
	return name == "bucket" || name == "key"
}

// Precondition implements ObjectStore: S3 compares ETags.
func (s *S3) Precondition() string { return "etag" }

// CheckIn implements ObjectStore.
func (s *S3) CheckIn() (string, string) { return s.CheckBucket, "s3.check_bucket" }

// Stamps implements ObjectStore.
func (s *S3) Stamps() bool { return s.Stamp }

func (s *S3) timeout() *time.Duration { return &s.Timeout }

func (s *S3) validate(f string, r *Route) Errors {
	var errs Errors
	if s.Endpoint == "" {
		errs = append(errs, &FieldError{Field: f + ".s3.endpoint", Msg: "required"})
	}
	return append(errs, validateS3(f, s)...)
}

// GCSDefaultEndpoint is the JSON API's address (adapters/gcs).
const GCSDefaultEndpoint = "https://storage.googleapis.com"

// Kind implements ObjectStore.
func (g *GCS) Kind() string { return "gcs" }

// StoreEndpoint implements ObjectStore.
func (g *GCS) StoreEndpoint() string { return cmp.Or(g.Endpoint, GCSDefaultEndpoint) }

// TemplateVar implements ObjectStore: {bucket} and {object}.
func (g *GCS) TemplateVar(name string) bool { return name == "bucket" || name == "object" }

// Precondition implements ObjectStore: GCS compares generations.
func (g *GCS) Precondition() string { return "generation" }

// CheckIn implements ObjectStore.
func (g *GCS) CheckIn() (string, string) { return g.CheckBucket, "gcs.check_bucket" }

// Stamps implements ObjectStore.
func (g *GCS) Stamps() bool { return g.Stamp }

func (g *GCS) timeout() *time.Duration { return &g.Timeout }

func (g *GCS) validate(f string, r *Route) Errors { return validateGCS(f, r) }

// Kind implements ObjectStore.
func (a *Azure) Kind() string { return "azure" }

// StoreEndpoint implements ObjectStore.
func (a *Azure) StoreEndpoint() string { return a.Endpoint }

// TemplateVar implements ObjectStore: {container} and {blob}.
func (a *Azure) TemplateVar(name string) bool { return name == "container" || name == "blob" }

// Precondition implements ObjectStore: the Blob service compares ETags.
func (a *Azure) Precondition() string { return "etag" }

// CheckIn implements ObjectStore.
func (a *Azure) CheckIn() (string, string) { return a.CheckContainer, "azure.check_container" }

// Stamps implements ObjectStore.
func (a *Azure) Stamps() bool { return a.Stamp }

func (a *Azure) timeout() *time.Duration { return &a.Timeout }

func (a *Azure) validate(f string, r *Route) Errors { return validateAzure(f, r) }
