// Package fencegate holds the domain types shared by the gateway, the lease
// coordinator and their adapters: fencing tokens, fence state, the error
// body every refusal uses, the HTTP method registry (methods.go) and the
// defaults that several packages share.
//
// A fencing token is a strictly increasing number handed out per lease
// acquisition. The gateway stores, per resource, the highest token it has
// accepted and refuses any write that carries an older one, so a worker that
// paused past its lease cannot overwrite the work of the lease's next owner.
package fencegate

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Defaults that the configuration and the libraries share. Each is defined
// here once; everything else refers to it.
const (
	// DefaultTokenHeader is the request header that carries the fencing token.
	DefaultTokenHeader = "Fencing-Token"
	// DefaultUpstreamTimeout bounds one forwarded request, body and answer,
	// on a route that sets no timeout.
	DefaultUpstreamTimeout = 30 * time.Second
	// DrainMargin is how much longer than its route's forward timeout a
	// newer write waits, by default, for older ones still in flight: by
	// then the timeout has ended every older forward.
	DrainMargin = time.Second
	// DefaultDrainTimeout is the drain wait of a route with the default
	// forward timeout.
	DefaultDrainTimeout = DefaultUpstreamTimeout + DrainMargin
	// DefaultStoreTimeout bounds one call to the fence store (a PostgreSQL
	// statement and its lock waits).
	DefaultStoreTimeout = 5 * time.Second
	// MaxRefusalBody is as much of a refusal's body as clients read to
	// decode it (a refusal is far smaller).
	MaxRefusalBody = 64 << 10
	// MaxAPIBody caps the JSON request bodies of the coordinator and admin
	// APIs.
	MaxAPIBody = 64 << 10
)

// MaxToken is the largest valid token (tokens are positive int64 so that they
// fit a PostgreSQL bigint and a sequence).
const MaxToken = 1<<63 - 1

// Error codes. They are a public contract: clients and dashboards match on them.
const (
	CodeMissingToken        = "missing_fencing_token"
	CodeInvalidToken        = "invalid_fencing_token"
	CodeStaleToken          = "stale_fencing_token"
	CodeUnknownToken        = "unknown_fencing_token"
	CodeFenceUnavailable    = "fence_unavailable"
	CodeFenceDraining       = "fence_draining"
	CodeNoRoute             = "no_route"
	CodeInvalidResource     = "invalid_resource"
	CodeInvalidMethod       = "invalid_method"
	CodeUnauthorized        = "unauthorized"
	CodeForbidden           = "forbidden"
	CodeBodyTooLarge        = "body_too_large"
	CodeUpstreamUnavailable = "upstream_unavailable"
	CodeUpstreamTimeout     = "upstream_timeout"
	CodeTooManyWrites       = "too_many_writes"
	CodeInvalidRequest      = "invalid_request"
	CodeLeaseHeld           = "lease_held"
	CodeLeaseLost           = "lease_lost"
	CodePreconditionFailed  = "precondition_failed"
	// CodeTokenOutOfRange: a token (a write's, where tokens are not
	// verified, or a hand advance's) raises a fence further than
	// fence.max_advance allows, or a fence reset asks for a value below the
	// highest token issued. 409.
	CodeTokenOutOfRange = "token_out_of_range"
	// CodeStoreRegressed: the fence store went back (an asynchronous
	// standby promoted, an older backup restored): fenced writes and token
	// issuance are refused until an operator runs `fencegate fence
	// recover` (docs/recovery.md). 503.
	CodeStoreRegressed = "fence_store_regressed"
	// CodeTokenSourceUnavailable: the lock service a route's tokens come
	// from (etcd, ZooKeeper) cannot be asked whether a new token is one
	// it issued; the write is refused, never forwarded unchecked. 503.
	CodeTokenSourceUnavailable = "token_source_unavailable"
	// CodeInternal: a failure inside fencegate with no better code. 500.
	CodeInternal = "internal_error"
	// CodeForeignDestination: a request whose Destination (WebDAV COPY,
	// MOVE) is not a resource of the route fencing it (another host,
	// another route, no route): the gateway cannot fence that write. 400.
	CodeForeignDestination = "foreign_destination"
	// CodeNotLockHolder: a route's token source found the token's lock key
	// or node, but not as the lock's holder when it was asked: a waiter's,
	// one put by hand outside the recipe, or one deleted before the
	// token's first write arrived. The number belongs to the lock; the
	// sender is not proven to hold it. 409.
	CodeNotLockHolder = "not_lock_holder"
	// CodeNotFound: a console listing that is switched off. 404.
	CodeNotFound = "not_found"
)

// Error is a refusal made by fencegate itself (not by an upstream). Its JSON
// form is the error body of docs/design.md §3; zero fields are omitted. It
// names no HTTP status: the code decides it, at the edge (package
// httprefusal), so the stores and the coordinator decide what is refused
// and why, never how a protocol spells it.
type Error struct {
	Code     string `json:"error"`
	Message  string `json:"message"`
	Resource string `json:"resource,omitempty"`
	Token    int64  `json:"token,omitempty"`
	Highest  int64  `json:"highest,omitempty"`
	Route    string `json:"route,omitempty"`
	// Owner and ExpiresAt describe the current holder for lease_held.
	Owner     string     `json:"owner,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`

	// RetryAfter, if positive, is how long the refused condition is
	// expected to last: a client retrying sooner is refused again. It is
	// the refuser's knowledge (a drain lasts about a second, a regressed
	// store needs an operator), not a protocol's, so the domain sets it;
	// over HTTP it is the Retry-After header, in whole seconds rounded up.
	RetryAfter time.Duration `json:"-"`
	// Err is the underlying cause, for logs; never sent to clients.
	Err error `json:"-"`
}

func (e *Error) Error() string {
	if e.Err != nil {
		if cause := e.Err.Error(); cause != "" {
			return e.Code + ": " + e.Message + ": " + cause
		}
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, &Error{Code: c}) match on the code alone.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Message == "" && t.Resource == ""
}

// Errorf builds a refusal with code and a formatted message. (Before,
// its first argument was the HTTP status; the code decides it now.)
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// The constructors below are the one place each refusal code gets its
// wording and, where it is fixed, its retry hint. Each one's comment
// names the HTTP status its code is answered with (httprefusal).

// StaleError is the headline refusal: token is older than highest. 409.
func StaleError(resource string, token, highest int64) *Error {
	return &Error{
		Code:     CodeStaleToken,
		Message:  fmt.Sprintf("token %d is older than %d already accepted for %s", token, highest, resource),
		Resource: resource,
		Token:    token,
		Highest:  highest,
	}
}

// Unavailable is the fail-closed refusal when fence state cannot be read or
// advanced (invariant I4). 503, retry after a second.
func Unavailable(resource string, err error) *Error {
	return &Error{
		Code:       CodeFenceUnavailable,
		Message:    "fence state for " + resource + " cannot be read or advanced; the write was not forwarded",
		Resource:   resource,
		RetryAfter: time.Second,
		Err:        err,
	}
}

// Draining refuses a newer write whose older in-flight writes did not end
// within drain (I2); cause, if any, says why the wait could not finish.
// 503, retry after a second.
func Draining(resource string, token int64, drain time.Duration, cause error) *Error {
	return &Error{Code: CodeFenceDraining,
		Message:  fmt.Sprintf("an older write for %s is still in flight after %s; not forwarding token %d before it ends", resource, drain, token),
		Resource: resource, Token: token, Highest: token,
		RetryAfter: time.Second, Err: cause,
	}
}

// StoreRegressed refuses a write or an issuance on a store that went back;
// cause says how it was found (timelines, token numbers: no secrets).
// 503, retry after 5 s (an operator must act).
func StoreRegressed(resource, cause string) *Error {
	return &Error{Code: CodeStoreRegressed,
		Message: "the fence store went back (" + cause + "); fenced writes and token issuance are refused until an operator runs " +
			"`fencegate fence recover` (docs/recovery.md), which makes every token issued before it worthless",
		Resource: resource, RetryAfter: 5 * time.Second,
	}
}

// Unverified turns the error of a token verifier into the refusal: a
// refusal (Refusal: unknown_fencing_token, token_source_unavailable) as it
// is, anything else fence_unavailable.
func Unverified(resource string, token int64, err error) error {
	if err == nil {
		return nil
	}
	if fe, ok := Refusal(err); ok {
		return fe
	}
	return Unavailable(resource, fmt.Errorf("verify token %d: %w", token, err))
}

// Internal is the refusal for a failure with no better code; err goes to
// the log only. 500.
func Internal(err error) *Error {
	return &Error{Code: CodeInternal, Message: "internal error", Err: err}
}

// AsError returns the refusal err stands for (Refusal), or Internal(err).
func AsError(err error) *Error {
	if e, ok := Refusal(err); ok {
		return e
	}
	return Internal(err)
}

// Domain errors a store or a fence reports in its own terms. Refusal (and
// so AsError, which the gateway and the admin API answer with) turns each
// into the code and message a client gets (and httprefusal the code into
// a status): a store never chooses an HTTP status.

// ErrResetNotPositive: a fence reset asked for a token of zero or below.
var ErrResetNotPositive = errors.New("reset needs a positive token")

// ResetBelowIssuedError: a fence reset asked for To, below Issued, the
// highest token the coordinator issued for Resource (docs/design.md I7).
type ResetBelowIssuedError struct {
	Resource   string
	To, Issued int64
}

func (e *ResetBelowIssuedError) Error() string {
	return fmt.Sprintf("the coordinator issued token %d for %s: a fence is never reset below the highest token issued (asked %d)",
		e.Issued, e.Resource, e.To)
}

// ForwardTimeoutError: a shared fence cut a write's forward that outlasted
// its forward timeout, the wait a drain allows a lost session's writes.
type ForwardTimeoutError struct {
	Timeout time.Duration
}

func (e *ForwardTimeoutError) Error() string {
	return fmt.Sprintf("the forward exceeded the shared fence's forward timeout (%s) and was cut", e.Timeout)
}

// SessionLostError: the database session holding the marker of a write in
// flight on Resource was lost, so its forward was cut; unlike a refusal
// before the forward, the upstream may already have applied it.
type SessionLostError struct {
	Resource string
	Err      error
}

func (e *SessionLostError) Error() string { return "marker session lost: " + e.Err.Error() }
func (e *SessionLostError) Unwrap() error { return e.Err }

// UnknownTokenError: a token verifier (the coordinator's records, etcd,
// ZooKeeper) found no acquisition that issued Token for Resource. Why says
// what was looked for, for the client's message.
type UnknownTokenError struct {
	Resource string
	Token    int64
	Why      string
}

func (e *UnknownTokenError) Error() string { return e.Why }

// TokenSourceUnavailableError: the lock service a route's tokens come from
// (Source, e.g. "etcd") could not be asked whether Token was issued; the
// write is refused until it answers.
type TokenSourceUnavailableError struct {
	Source   string
	Resource string
	Token    int64
	Err      error
}

func (e *TokenSourceUnavailableError) Error() string {
	return fmt.Sprintf("%s cannot be reached to verify token %d for %s; the write was not forwarded", e.Source, e.Token, e.Resource)
}
func (e *TokenSourceUnavailableError) Unwrap() error { return e.Err }

// Refusal returns the refusal err stands for: err's own *Error, or the
// answer to one of the domain errors above; false for any other error.
func Refusal(err error) (*Error, bool) {
	var (
		e  *Error
		rb *ResetBelowIssuedError
		ft *ForwardTimeoutError
		sl *SessionLostError
		ut *UnknownTokenError
		su *TokenSourceUnavailableError
	)
	switch {
	case errors.As(err, &e):
		return e, true
	case errors.Is(err, ErrResetNotPositive):
		return Errorf(CodeInvalidRequest, "%s", ErrResetNotPositive), true
	case errors.As(err, &rb):
		return &Error{Code: CodeTokenOutOfRange, Message: rb.Error(),
			Resource: rb.Resource, Token: rb.To}, true
	case errors.As(err, &ft):
		return Errorf(CodeUpstreamTimeout, "%s", ft), true
	case errors.As(err, &sl):
		return &Error{
			Code:       CodeFenceUnavailable,
			Message:    "the shared fence's session guarding this write for " + sl.Resource + " (its PostgreSQL connection or etcd lease) was lost while it was forwarded; the forward was cut and the upstream may or may not have applied it",
			Resource:   sl.Resource,
			RetryAfter: time.Second,
			Err:        sl,
		}, true
	case errors.As(err, &ut):
		return &Error{Code: CodeUnknownToken, Message: ut.Why,
			Resource: ut.Resource, Token: ut.Token}, true
	case errors.As(err, &su):
		return &Error{Code: CodeTokenSourceUnavailable, Message: su.Error(),
			Resource: su.Resource, Token: su.Token, RetryAfter: time.Second, Err: su.Err}, true
	}
	return nil, false
}

// MissingToken: a fenced write without the token header. 428.
func MissingToken(header string) *Error {
	return Errorf(CodeMissingToken,
		"this write is fenced: send the lease's token in the %s header", header)
}

// InvalidToken: a token header that is not one canonical token. 400.
func InvalidToken(format string, args ...any) *Error {
	return Errorf(CodeInvalidToken, format, args...)
}

// NoRoute: no route matches the request. 404.
func NoRoute(method, host, path string) *Error {
	return Errorf(CodeNoRoute, "no route for %s %s%s", method, host, path)
}

// InvalidResource: the request maps to no single resource key. 400.
func InvalidResource(format string, args ...any) *Error {
	return Errorf(CodeInvalidResource, format, args...)
}

// InvalidMethod: a method spelling or override the gateway will not fence. 400.
func InvalidMethod(format string, args ...any) *Error {
	return Errorf(CodeInvalidMethod, format, args...)
}

// InvalidRequest: a request whose shape could change after the decision. 400.
func InvalidRequest(format string, args ...any) *Error {
	return Errorf(CodeInvalidRequest, format, args...)
}

// Forbidden: owner may not write resource. 403.
func Forbidden(owner, resource string) *Error {
	e := Errorf(CodeForbidden, "%s may not write %s", owner, resource)
	e.Resource = resource
	return e
}

// BodyTooLarge: the body exceeds a route's limit of max bytes. 413.
func BodyTooLarge(max int64) *Error {
	return Errorf(CodeBodyTooLarge,
		"request body exceeds this route's limit of %d bytes", max)
}

// TooManyWrites: a route already forwards limit writes. 503.
func TooManyWrites(limit int) *Error {
	e := Errorf(CodeTooManyWrites,
		"this route already forwards %d writes, its limit; retry later", limit)
	e.RetryAfter = time.Second
	return e
}

// UpstreamTimeout: the upstream did not answer within d. 504.
func UpstreamTimeout(d time.Duration) *Error {
	return Errorf(CodeUpstreamTimeout, "upstream did not answer within %s", d)
}

// UpstreamUnavailable: the upstream could not be reached; reason must not
// name internal addresses. 502.
func UpstreamUnavailable(reason string) *Error {
	return Errorf(CodeUpstreamUnavailable, "upstream request failed: %s", reason)
}

// ParseToken validates the values of the token header. A token is exactly one
// canonical decimal integer in 1..2^63-1: no sign, no spaces, no leading zeros,
// no list. Returns a *Error with code missing_fencing_token (no header) or
// invalid_fencing_token.
func ParseToken(header string, values []string) (int64, *Error) {
	switch len(values) {
	case 0:
		return 0, MissingToken(header)
	case 1:
	default:
		return 0, InvalidToken("%s must be sent exactly once, got %d values", header, len(values))
	}
	v := values[0]
	bad := func(why string) (int64, *Error) {
		return 0, InvalidToken("%s %s: must be a decimal integer from 1 to %d", header, why, int64(MaxToken))
	}
	if v == "" {
		return bad("is empty")
	}
	if len(v) > 19 {
		return bad("is too long")
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return bad(fmt.Sprintf("has %q at offset %d", v[i], i))
		}
	}
	if v == "0" {
		return bad("is zero")
	}
	if v[0] == '0' {
		return bad("has a leading zero")
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return bad("overflows")
	}
	return n, nil
}

// FenceState is the durable per-resource record of the fence.
type FenceState struct {
	Resource  string    `json:"resource"`
	Highest   int64     `json:"highest"`
	Ready     bool      `json:"ready"`
	Owner     string    `json:"owner,omitempty"`
	ETag      string    `json:"etag,omitempty"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}
