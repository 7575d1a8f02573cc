package fencegate

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"
)

func TestParseToken(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   int64
		code   string
	}{
		{"one", []string{"1"}, 1, ""},
		{"typical", []string{"42"}, 42, ""},
		{"max", []string{"9223372036854775807"}, MaxToken, ""},
		{"missing", nil, 0, CodeMissingToken},
		{"empty", []string{""}, 0, CodeInvalidToken},
		{"zero", []string{"0"}, 0, CodeInvalidToken},
		{"negative", []string{"-42"}, 0, CodeInvalidToken},
		{"plus sign", []string{"+42"}, 0, CodeInvalidToken},
		{"leading space", []string{" 42"}, 0, CodeInvalidToken},
		{"trailing space", []string{"42 "}, 0, CodeInvalidToken},
		{"inner space", []string{"4 2"}, 0, CodeInvalidToken},
		{"hex", []string{"0x2a"}, 0, CodeInvalidToken},
		{"leading zero", []string{"042"}, 0, CodeInvalidToken},
		{"float", []string{"42.0"}, 0, CodeInvalidToken},
		{"exponent", []string{"4e2"}, 0, CodeInvalidToken},
		{"overflow by one", []string{"9223372036854775808"}, 0, CodeInvalidToken},
		{"twenty digits", []string{"12345678901234567890"}, 0, CodeInvalidToken},
		{"list in one header", []string{"41, 42"}, 0, CodeInvalidToken},
		{"repeated header", []string{"41", "42"}, 0, CodeInvalidToken},
		{"repeated same value", []string{"42", "42"}, 0, CodeInvalidToken},
		{"unicode digit", []string{"４２"}, 0, CodeInvalidToken},
		{"nul", []string{"4\x002"}, 0, CodeInvalidToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseToken(DefaultTokenHeader, tt.values)
			if tt.code == "" {
				if err != nil || got != tt.want {
					t.Fatalf("ParseToken(%q) = %d, %v; want %d, nil", tt.values, got, err, tt.want)
				}
				return
			}
			if err == nil || err.Code != tt.code {
				t.Fatalf("ParseToken(%q) = %d, %v; want code %s", tt.values, got, err, tt.code)
			}
		})
	}
}

// FuzzParseToken checks that every accepted value is the canonical decimal
// form of a token in range, so two spellings never denote one token.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"1", "42", "9223372036854775807", "9223372036854775808", "-1", "042", " 1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseToken(DefaultTokenHeader, []string{s})
		if err != nil {
			if err.Code != CodeInvalidToken {
				t.Fatalf("ParseToken(%q): code %s", s, err.Code)
			}
			return
		}
		if n < 1 || strconv.FormatInt(n, 10) != s {
			t.Fatalf("ParseToken(%q) = %d: accepted a non-canonical or out-of-range token", s, n)
		}
	})
}

// TestErrorJSON: the JSON form of a refusal is the error body of
// docs/design.md §3 (its status and headers: httprefusal).
func TestErrorJSON(t *testing.T) {
	e := StaleError("invoices/2026-11", 41, 42)
	e.Route = "invoices"
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"error":    "stale_fencing_token",
		"message":  "token 41 is older than 42 already accepted for invoices/2026-11",
		"resource": "invoices/2026-11", "token": 41.0, "highest": 42.0, "route": "invoices",
	}
	if len(got) != len(want) {
		t.Fatalf("got %v; want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v; want %v", k, got[k], v)
		}
	}
	if u := Unavailable("r", nil); u.RetryAfter != time.Second {
		t.Fatalf("unavailable: retry hint %v; want 1s", u.RetryAfter)
	}
}

// TestRefusalOfDomainErrors: the domain errors the stores and fences
// report stand for exactly the refusals that were built in the stores:
// same code, message, fields and retry hint, also when wrapped. (Their
// wire answers in every dialect, byte for byte:
// httprefusal.TestRefusalWireAnswers.)
func TestRefusalOfDomainErrors(t *testing.T) {
	lost := errors.New("conn closed")
	for _, tc := range []struct {
		err  error
		want *Error
	}{
		{ErrResetNotPositive, Errorf(CodeInvalidRequest, "reset needs a positive token")},
		{&ResetBelowIssuedError{Resource: "/r", To: 4, Issued: 7}, &Error{
			Code:     CodeTokenOutOfRange,
			Message:  "the coordinator issued token 7 for /r: a fence is never reset below the highest token issued (asked 4)",
			Resource: "/r", Token: 4,
		}},
		{&ForwardTimeoutError{Timeout: 1500 * time.Millisecond}, Errorf(CodeUpstreamTimeout,
			"the forward exceeded the shared fence's forward timeout (%s) and was cut", 1500*time.Millisecond)},
		{&SessionLostError{Resource: "/d", Err: lost}, &Error{
			Code:       CodeFenceUnavailable,
			Message:    "the shared fence's session guarding this write for /d (its PostgreSQL connection or etcd lease) was lost while it was forwarded; the forward was cut and the upstream may or may not have applied it",
			Resource:   "/d",
			RetryAfter: time.Second,
		}},
		{&UnknownTokenError{Resource: "/u", Token: 9, Why: "token 9 is not the create revision of an etcd lock key of /u"}, &Error{
			Code:     CodeUnknownToken,
			Message:  "token 9 is not the create revision of an etcd lock key of /u",
			Resource: "/u", Token: 9,
		}},
		{&TokenSourceUnavailableError{Source: "etcd", Resource: "/u", Token: 9, Err: lost}, &Error{
			Code:     CodeTokenSourceUnavailable,
			Message:  "etcd cannot be reached to verify token 9 for /u; the write was not forwarded",
			Resource: "/u", Token: 9, RetryAfter: time.Second,
		}},
	} {
		for _, err := range []error{tc.err, fmt.Errorf("wrapped: %w", tc.err)} {
			got, ok := Refusal(err)
			if !ok {
				t.Errorf("Refusal(%v) found no refusal", err)
				continue
			}
			if g, w := withoutCause(got), withoutCause(tc.want); !reflect.DeepEqual(g, w) {
				t.Errorf("refusal of %v:\n%+v\nwant\n%+v", err, g, w)
			}
			if !reflect.DeepEqual(AsError(err), got) {
				t.Errorf("AsError(%v) = %+v; want %+v", err, AsError(err), got)
			}
		}
	}
	if !errors.Is(mustRefusal(t, &SessionLostError{Resource: "/d", Err: lost}), lost) {
		t.Error("the refusal of a lost session does not keep its cause for the log")
	}
	if !errors.Is(mustRefusal(t, &TokenSourceUnavailableError{Source: "etcd", Resource: "/u", Err: lost}), lost) {
		t.Error("the refusal of an unreachable token source does not keep its cause for the log")
	}
	if e, ok := Unverified("/u", 9, &UnknownTokenError{Resource: "/u", Token: 9}).(*Error); !ok || e.Code != CodeUnknownToken {
		t.Errorf("Unverified passed an unknown token on as %v, not unknown_fencing_token", e)
	}
	if _, ok := Refusal(errors.New("disk full")); ok {
		t.Error("Refusal found a refusal in an error that is none")
	}
}

// withoutCause is e without its cause, which goes to the log only.
func withoutCause(e *Error) Error {
	c := *e
	c.Err = nil
	return c
}

func mustRefusal(t *testing.T, err error) *Error {
	t.Helper()
	e, ok := Refusal(err)
	if !ok {
		t.Fatalf("Refusal(%v) found no refusal", err)
	}
	return e
}
