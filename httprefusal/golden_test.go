package httprefusal_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/azure"
	"github.com/fencegate/fencegate/adapters/gcs"
	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/adapters/s3"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/httprefusal"
)

var update = flag.Bool("update", false, "rewrite testdata/refusals.golden from the current code")

// refusal is one refusal as the code that makes it builds it.
type refusal struct {
	name string
	err  func(t *testing.T) *fencegate.Error
}

// refusals covers every refusal code, each built as the code that refuses
// with it builds it, including the codes answered with another status
// than their own where an edge says so.
func refusals() []refusal {
	cause := errors.New("dial tcp 10.0.0.7:5432: connection refused (postgres://fencegate:s3cret@db)")
	exp := time.Date(2026, 11, 5, 10, 30, 0, 250_000_000, time.UTC)
	domain := func(err error) func(t *testing.T) *fencegate.Error {
		return func(t *testing.T) *fencegate.Error {
			e, ok := fencegate.Refusal(fmt.Errorf("wrapped: %w", err))
			if !ok {
				t.Fatalf("Refusal(%v) found no refusal", err)
			}
			return e
		}
	}
	fixed := func(e *fencegate.Error) func(*testing.T) *fencegate.Error {
		return func(*testing.T) *fencegate.Error { return e }
	}
	withRoute := func(e *fencegate.Error) *fencegate.Error { e.Route = "invoices"; return e }
	return []refusal{
		{"stale", fixed(withRoute(fencegate.StaleError("invoices/2026-11", 41, 42)))},
		{"unavailable", fixed(fencegate.Unavailable("/orders/1", cause))},
		{"draining", fixed(fencegate.Draining("/orders/1", 7, 31*time.Second, cause))},
		{"store_regressed", fixed(fencegate.StoreRegressed("/orders/1", "timeline 3, was 4"))},
		{"internal", fixed(fencegate.Internal(cause))},
		{"as_error_plain", fixed(fencegate.AsError(cause))},
		{"missing_token", fixed(fencegate.MissingToken(fencegate.DefaultTokenHeader))},
		{"invalid_token", func(t *testing.T) *fencegate.Error {
			_, e := fencegate.ParseToken(fencegate.DefaultTokenHeader, []string{"042"})
			return e
		}},
		{"no_route", fixed(fencegate.NoRoute("PUT", "example.com", "/nowhere"))},
		{"invalid_resource", fixed(fencegate.InvalidResource("key is longer than %d bytes", 1024))},
		{"invalid_method", fixed(fencegate.InvalidMethod("method %q has a lower-case letter", "put"))},
		{"invalid_request", fixed(fencegate.InvalidRequest("Connection names %s", "Fencing-Token"))},
		{"forbidden", fixed(withRoute(fencegate.Forbidden("worker-a", "/billing/1")))},
		{"body_too_large", fixed(fencegate.BodyTooLarge(1 << 20))},
		{"too_many_writes", fixed(fencegate.TooManyWrites(8))},
		{"upstream_timeout", fixed(fencegate.UpstreamTimeout(30 * time.Second))},
		{"upstream_unavailable", fixed(fencegate.UpstreamUnavailable("connection refused"))},
		{"unverified", func(t *testing.T) *fencegate.Error {
			e, _ := fencegate.Unverified("/u", 9, cause).(*fencegate.Error)
			return e
		}},
		{"reset_not_positive", domain(fencegate.ErrResetNotPositive)},
		{"reset_below_issued", domain(&fencegate.ResetBelowIssuedError{Resource: "/r", To: 4, Issued: 7})},
		{"forward_timeout", domain(&fencegate.ForwardTimeoutError{Timeout: 1500 * time.Millisecond})},
		{"session_lost", domain(&fencegate.SessionLostError{Resource: "/d", Err: cause})},
		{"unknown_token", domain(&fencegate.UnknownTokenError{Resource: "/u", Token: 9, Why: "token 9 is not the create revision of an etcd lock key of /u"})},
		{"token_source_unavailable", domain(&fencegate.TokenSourceUnavailableError{Source: "etcd", Resource: "/u", Token: 9, Err: cause})},
		// As coordinator/service.go builds them.
		{"coordinator_invalid", fixed(fencegate.Errorf(fencegate.CodeInvalidRequest, "ttl must be between 1ms and %v, got %v", 10*time.Minute, time.Hour))},
		{"lease_held", fixed(&fencegate.Error{
			Code:     fencegate.CodeLeaseHeld,
			Message:  "lease on /orders/1 is held by worker-a until " + exp.Format(time.RFC3339Nano),
			Resource: "/orders/1", Owner: "worker-a", ExpiresAt: &exp, Err: errors.New("held"),
		})},
		{"lease_lost", fixed(&fencegate.Error{
			Code:     fencegate.CodeLeaseLost,
			Message:  "lease on /orders/1 with token 3 of worker-a is not current: it expired, was released or a newer lease was acquired",
			Resource: "/orders/1", Owner: "worker-a", Token: 3, Err: errors.New("lost"),
		})},
		{"coordinator_unavailable", fixed(&fencegate.Error{
			Code:     fencegate.CodeFenceUnavailable,
			Message:  "the lease store is unavailable; retry (a retried acquire by the same owner is safe)",
			Resource: "/orders/1", RetryAfter: time.Second, Err: cause,
		})},
		// As the gateway, auth and precondition build them.
		{"unauthorized", fixed(fencegate.Errorf(fencegate.CodeUnauthorized, "%s", "unknown or revoked API key"))},
		{"auth_body_too_large", fixed(fencegate.Errorf(fencegate.CodeBodyTooLarge, "request body over %d bytes", 64<<10))},
		{"token_out_of_range", func(t *testing.T) *fencegate.Error {
			var e *fencegate.Error
			if !errors.As(gateway.CheckAdvance("/r", 2000000, 5, 1000000, "the fence's highest token"), &e) {
				t.Fatal("CheckAdvance refused nothing")
			}
			return e
		}},
		{"not_lock_holder", fixed(gateway.NotLockHolder("/r", 12, "key /locks/r/1 is a waiter's"))},
		{"foreign_destination", fixed(fencegate.Errorf(fencegate.CodeForeignDestination, "Destination %s is on another host", "http://other/x"))},
		{"precondition_failed", fixed(&fencegate.Error{
			Code:     fencegate.CodePreconditionFailed,
			Message:  "the object is not the version this gateway last wrote (a write bypassed the gateway, or a delayed one landed); nothing was written",
			Resource: "b/k", Token: 5,
		})},
		{"precondition_head_failed", fixed(&fencegate.Error{Code: fencegate.CodeUpstreamUnavailable,
			Message: "cannot learn the object's current ETag from the upstream", Resource: "b/k", Err: cause})},
		// Codes an edge answers with another status than the code's own.
		{"lower_while_in_flight", fixed(httprefusal.WithStatus(http.StatusConflict, &fencegate.Error{
			Code:     fencegate.CodeFenceDraining,
			Message:  "2 writes for /r are in flight; a fence is lowered only when none is (retry)",
			Resource: "/r", RetryAfter: time.Second,
		}))},
		{"reset_unavailable", fixed(httprefusal.WithStatus(http.StatusConflict, fencegate.Errorf(fencegate.CodeInvalidRequest, "fence reset is not available here: %s", "shared mode")))},
		{"no_such_endpoint", fixed(httprefusal.WithStatus(http.StatusNotFound, fencegate.Errorf(fencegate.CodeInvalidRequest,
			"no such endpoint %s %s: see POST /v1/leases/acquire|renew|release, GET /v1/leases?resource=R", "GET", "/v1/nope")))},
		{"unsupported_media_type", fixed(httprefusal.WithStatus(http.StatusUnsupportedMediaType, fencegate.Errorf(fencegate.CodeInvalidRequest, "the %s API takes application/json", "coordinator")))},
		{"length_required", fixed(httprefusal.WithStatus(http.StatusLengthRequired, fencegate.Errorf(fencegate.CodeInvalidRequest, "a write must state its body's length")))},
		{"not_implemented", fixed(httprefusal.WithStatus(http.StatusNotImplemented, &fencegate.Error{Code: fencegate.CodeInvalidRequest, Message: "copy from another account is not supported by the gateway"}))},
		{"gcs_no_session", fixed(httprefusal.WithStatus(http.StatusNotFound, &fencegate.Error{Code: fencegate.CodeInvalidRequest, Message: "no such upload session", Resource: "b/o"}))},
		{"azure_lease_held", fixed(httprefusal.WithStatus(http.StatusConflict, &fencegate.Error{Code: fencegate.CodeForbidden, Resource: "c/b",
			Message: "the blob has an active lease the gateway does not hold"}))},
		{"console_not_found", fixed(fencegate.Errorf("not_found", "%s", "this listing is off"))},
		{"console_store_error", func(*testing.T) *fencegate.Error {
			e := fencegate.Errorf(fencegate.CodeFenceUnavailable, "%s: the store cannot be read now", "fences")
			e.RetryAfter = time.Second
			return e
		}},
		// Retry-After is whole seconds, rounded up.
		{"retry_after_rounded_up", func(*testing.T) *fencegate.Error {
			e := fencegate.Unavailable("/r", nil)
			e.RetryAfter = 1500 * time.Millisecond
			return e
		}},
		{"unknown_code", fixed(&fencegate.Error{Code: "something_new", Message: "a code without a status"})},
	}
}

// s3Refusals are S3's own refusals (its vocabulary, its statuses), as the
// S3 upstream's Inspect makes them.
func s3Refusals(t *testing.T) (*s3.Upstream, []refusal) {
	now := time.Date(2026, 11, 5, 10, 30, 0, 0, time.UTC)
	u, err := s3.New(context.Background(), s3.Options{
		Spec: objectstore.Spec{Route: "objects", Resource: "{bucket}/{key}", Endpoint: "http://127.0.0.1:1",
			Now: func() time.Time { return now }},
		AccessKeyID: "gateway", SecretAccessKey: "gateway-secret",
		Clients: []s3.Client{{AccessKeyID: "worker", SecretAccessKey: "worker-secret"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	inspect := func(method, target, body string, sign bool) func(t *testing.T) *fencegate.Error {
		return func(t *testing.T) *fencegate.Error {
			r := httptest.NewRequest(method, "http://gateway:8080"+target, strings.NewReader(body))
			r.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
			if sign {
				if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: "worker", SecretAccessKey: "worker-secret"},
					r, "UNSIGNED-PAYLOAD", "s3", "us-east-1", now); err != nil {
					t.Fatal(err)
				}
			}
			_, err := u.Inspect(r, 0)
			var e *fencegate.Error
			if !errors.As(err, &e) {
				t.Fatalf("Inspect(%s %s) = %v; want a refusal", method, target, err)
			}
			return e
		}
	}
	return u, []refusal{
		{"s3_unsigned", inspect("PUT", "/bucket/key", "x", false)},
		{"s3_not_implemented", inspect("PUT", "/bucket/key?renameObject", "", true)},
		{"s3_key_too_long", inspect("PUT", "/bucket/"+strings.Repeat("k", 1025), "x", true)},
		{"s3_bucket_config", inspect("PUT", "/bucket?policy", "{}", true)},
	}
}

// writers are the refusal writers of every dialect.
func writers(s3u *s3.Upstream) []struct {
	name  string
	write func(w http.ResponseWriter, r *http.Request, e *fencegate.Error)
} {
	return []struct {
		name  string
		write func(w http.ResponseWriter, r *http.Request, e *fencegate.Error)
	}{
		{"json", func(w http.ResponseWriter, _ *http.Request, e *fencegate.Error) { httprefusal.WriteJSON(w, e) }},
		{"s3", s3u.WriteError},
		{"gcs", must(gcs.New(gcs.Options{Spec: objectstore.Spec{Route: "objects", Endpoint: "http://127.0.0.1:1"}})).WriteError},
		{"azure", must(azure.New(azure.Options{Spec: objectstore.Spec{Route: "objects", Endpoint: "http://127.0.0.1:1/acct"}, SAS: "sv=2024-01-01&sig=x",
			Clients: []azure.Client{{AccountName: "worker", AccountKey: "d29ya2VyLWtleQ=="}}})).WriteError},
		// The console's pages answer a bad query (invalid_request) in plain text.
		{"text", func(w http.ResponseWriter, _ *http.Request, e *fencegate.Error) {
			http.Error(w, e.Message, httprefusal.Status(e))
		}},
	}
}

func must[U any](u U, err error) U {
	if err != nil {
		panic(err)
	}
	return u
}

var s3RequestID = regexp.MustCompile(`[0-9a-z]{10,14}`)

// TestRefusalWireAnswers: every refusal, in every dialect, for a write and
// a HEAD, is answered byte for byte as testdata/refusals.golden says
// (captured from the code before the domain stopped carrying HTTP
// statuses): status, headers and body.
func TestRefusalWireAnswers(t *testing.T) {
	s3u, s3r := s3Refusals(t)
	var out strings.Builder
	uncovered := codes(t)
	for _, rf := range append(refusals(), s3r...) {
		delete(uncovered, rf.err(t).Code)
		for _, wr := range writers(s3u) {
			if wr.name == "text" && rf.name != "invalid_request" {
				continue
			}
			for _, method := range []string{http.MethodPut, http.MethodHead} {
				e := rf.err(t)
				w := httptest.NewRecorder()
				wr.write(w, httptest.NewRequest(method, "http://gateway:8080/b/k", nil), e)
				fmt.Fprintf(&out, "=== %s %s %s\n%d\n", rf.name, wr.name, method, w.Code)
				reqID := w.Header().Get("X-Amz-Request-Id")
				var names []string
				for k := range w.Header() {
					names = append(names, k)
				}
				slices.Sort(names)
				for _, k := range names {
					for _, v := range w.Header()[k] {
						if k == "X-Amz-Request-Id" {
							v = "REQUEST-ID"
						}
						fmt.Fprintf(&out, "%s: %s\n", k, v)
					}
				}
				body := w.Body.String()
				if reqID != "" {
					if !s3RequestID.MatchString(reqID) {
						t.Fatalf("S3 request id %q", reqID)
					}
					body = strings.ReplaceAll(body, reqID, "REQUEST-ID")
				}
				fmt.Fprintf(&out, "\n%s\n", body)
			}
		}
	}
	for code, name := range uncovered {
		t.Errorf("no refusal with %s (%s) is answered here", name, code)
	}
	const golden = "testdata/refusals.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				at := i
				for at > 0 && !strings.HasPrefix(wl[at], "=== ") {
					at--
				}
				t.Fatalf("answers differ from %s at line %d, in %q:\ngot  %q\nwant %q", golden, i+1, wl[at], gl[i], wl[i])
			}
		}
		t.Fatalf("answers differ from %s in length: %d lines; want %d", golden, len(gl), len(wl))
	}
}
