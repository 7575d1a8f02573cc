// Package config is fencegate's YAML configuration: documented structs,
// DefaultConfig, strict decoding with file:line errors, ${ENV} expansion and
// a pure Validate that reports every problem with its field path.
package config

// The JSON Schema of this file's structs, served and embedded by package api.
//go:generate go run ./internal/genschema -o ../api/config.schema.json -config .

import (
	"fmt"
	"net/url"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/coordinator"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/resource"
	"github.com/goccy/go-yaml"
)

// Config is the whole file. Field names are a public contract.
type Config struct {
	// Gateway is the fencing proxy; nil runs no gateway (coordinator only).
	Gateway     *Gateway    `yaml:"gateway"`
	Store       Store       `yaml:"store"`
	Fence       Fence       `yaml:"fence"`
	Coordinator Coordinator `yaml:"coordinator"`
	Admin       Admin       `yaml:"admin"`
	TLS         TLS         `yaml:"tls"`
	Telemetry   Telemetry   `yaml:"telemetry"`
	Log         Log         `yaml:"log"`

	// src is where Parse read the values from (file, lines, environment
	// references); nil for a Config built in code.
	src *source
}

// Gateway configures the fencing proxy listener and its routes.
type Gateway struct {
	// Listen is the proxy's listen address.
	Listen string `yaml:"listen" jsonschema:"default=127.0.0.1:8080"`
	// TokenHeader is the request header carrying the fencing token.
	TokenHeader string `yaml:"token_header" jsonschema:"default=Fencing-Token"`
	// MaxHeaderBytes caps request headers (431 beyond). Default 64 KiB.
	MaxHeaderBytes int `yaml:"max_header_bytes" jsonschema:"default=65536"`
	// ReadHeaderTimeout bounds reading request headers (slowloris). Default 10s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout" jsonschema:"default=10s"`
	// IdleTimeout closes idle keep-alive connections. Default 2m.
	IdleTimeout time.Duration `yaml:"idle_timeout" jsonschema:"default=2m"`
	// ShutdownTimeout is how long SIGTERM waits for in-flight requests. Default 30s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout" jsonschema:"default=30s"`
	// MaxConnections caps the client connections held at once. Default:
	// from the open-file limit, after the admin and coordinator caps.
	MaxConnections int `yaml:"max_connections"`
	// FastPath serves plain-HTTP/1.1 writes of the common shape with
	// fencegate's own connection loop and everything else with net/http's
	// server. Default false: in the shipped route configuration it saved
	// no measurable CPU per write (bench/handover.sh, docs/performance.md),
	// and it is a second HTTP parser on the security boundary. Without
	// effect on a TLS listener.
	FastPath *bool `yaml:"fast_path" jsonschema:"default=false"`
	// Routes are matched in order; the first that matches serves.
	Routes []Route `yaml:"routes"`
}

// Route maps matching requests to one upstream and one resource template.
type Route struct {
	// Name names the route in metrics, logs and refusal bodies.
	Name     string    `yaml:"name" jsonschema:"required"`
	Match    Match     `yaml:"match"`
	Upstream *Upstream `yaml:"upstream"`
	S3       *S3       `yaml:"s3"`
	// GCS is a Google Cloud Storage upstream (adapters/gcs).
	GCS *GCS `yaml:"gcs"`
	// Azure is an Azure Blob Storage upstream (adapters/azure).
	Azure *Azure `yaml:"azure"`
	// Resource is the template of the resource key: {path}, {path.N},
	// {host}, {header.Name}; S3 routes also {bucket} and {key}.
	Resource string `yaml:"resource"`
	// FencedMethods, if set, narrows the fenced methods to these names;
	// the default fences every method except GET, HEAD, OPTIONS and TRACE.
	// Names must be registered methods (fencegate.KnownMethod) or declared in
	// ExtensionMethods; methods the route does not know stay fenced.
	FencedMethods []string `yaml:"fenced_methods"`
	// ExtensionMethods declares method names outside the HTTP method
	// registry that fenced_methods and match.methods may use.
	ExtensionMethods []string `yaml:"extension_methods"`
	// FenceReads fences every method, reads included.
	FenceReads bool `yaml:"fence_reads"`
	// CaseInsensitive folds resource keys to lower case, for upstreams that
	// fold case (otherwise /A and /a would be two fences for one object).
	CaseInsensitive bool `yaml:"case_insensitive"`
	// MaxBodyBytes caps request bodies (413 beyond). Default 0: no limit
	// (bodies stream, so size costs no memory).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// DrainTimeout bounds the wait of a newer write for older ones in flight.
	// Default: the upstream timeout plus one second.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// ForwardToken sends the Fencing-Token header on to the upstream.
	// Default true: upstreams that can compare tokens should see them.
	ForwardToken *bool `yaml:"forward_token" jsonschema:"default=true"`
	// Precondition "etag" makes writes conditional on the ETag the gateway
	// last wrote for the object (S3 routes, and upstream routes whose
	// resource has {path}); see package precondition.
	Precondition string `yaml:"precondition" jsonschema:"enum=,enum=none,enum=etag,enum=generation"`
	// Auth, if set, requires credentials and may limit each identity to
	// resource prefixes (see production.go).
	Auth *Auth `yaml:"auth"`
	// MaxInflightWrites caps the fenced writes this route forwards at once;
	// beyond it writes are refused 503 too_many_writes. Default 0: no cap.
	MaxInflightWrites int `yaml:"max_inflight_writes"`
	// KeyVersion confirms a change of how the route builds resource keys
	// (resource, case_insensitive, match, or routes in front of it): a
	// reload that changes them is refused unless key_version changes too,
	// because every resource would move to a fresh, empty fence. Default 0.
	KeyVersion int `yaml:"key_version" jsonschema:"default=0"`
	// DestinationMethods are the methods whose Destination header names a
	// second resource the request writes (WebDAV COPY and MOVE), fenced
	// with the same token. Nil: COPY and MOVE where the route fences them
	// and its key comes from the path; empty: none.
	DestinationMethods []string `yaml:"destination_methods"`
	// Hierarchical makes the route's resource keys a hierarchy separated
	// by '/' (gateway.Scope): a DELETE or MOVE of a key, and a COPY or
	// MOVE's Destination, is a write of everything below it, refused while
	// a key below holds a newer token, and a member write older than it is
	// refused afterwards; a POST, PUT or PATCH of a key refuses no lease
	// below it. Nil: on where the resource template ends with {path} (or
	// names it and the route names COPY or MOVE) and on S3 and Azure
	// routes, in either fence mode. true, or COPY or MOVE named in
	// match.methods or fenced_methods: every write of a key is a write of
	// everything below it (the rule before trees went by method). false:
	// every write checked on its own key alone, safe only where no request
	// changes the keys below the one it names.
	Hierarchical *bool `yaml:"hierarchical"`
	// TokenSource, if set, is the lock service (etcd, ZooKeeper) whose
	// tokens this route accepts and verifies (tokensource.go).
	TokenSource *TokenSource `yaml:"token_source"`
}

// Match selects requests; every set field must match.
type Match struct {
	// Host is the Host to match.
	Host string `yaml:"host"`
	// PathPrefix is the path prefix to match, on the canonical path.
	PathPrefix string `yaml:"path_prefix"`
	// Methods are the methods to match. Default all.
	Methods []string `yaml:"methods"`
}

// Upstream is a plain HTTP(S) upstream.
type Upstream struct {
	// URL is the upstream's base URL.
	URL string `yaml:"url"`
	// Timeout bounds one forwarded request, body and answer. Default 30s.
	Timeout time.Duration `yaml:"timeout" jsonschema:"default=30s"`
	// Headers are set on every forwarded request (credential injection);
	// the same headers sent by the worker are removed first.
	Headers map[string]string `yaml:"headers"`
	// TLS configures the connection to an https upstream.
	TLS *UpstreamTLS `yaml:"tls"`
	// CheckPath, if set on a route with `precondition: etag`, is a path
	// prefix under which the gateway may write and delete a probe object at
	// start (and `fencegate doctor`) to verify that the upstream honours
	// conditional writes, racing ones included.
	CheckPath string `yaml:"check_path"`
	// PreserveHost sends the client's Host header upstream instead of the
	// upstream URL's host, for upstreams that compare URLs a request
	// carries (WebDAV Destination, If:) with its Host. Default false.
	PreserveHost bool `yaml:"preserve_host"`
	// KeepAliveWrites keeps the connection to a plain-http upstream after a
	// request with a body, which otherwise goes with Connection: close
	// (about half the gateway's CPU per write), when the answer is a 2xx
	// begun after the body was sent whole; writes with a precondition
	// (If-*) or an Expect still close. Set it only for an upstream
	// that reads or discards the body of every request it answers, as
	// `fencegate doctor` checks: one that answers a write unread would take
	// the body for its next request, and hand that answer to another
	// worker. Default false.
	KeepAliveWrites bool `yaml:"keep_alive_writes"`
	// H2C speaks HTTP/2 over cleartext to an http:// upstream, with prior
	// knowledge (no upgrade from HTTP/1.1): the upstream must accept it
	// (nginx `listen ... http2` without ssl, Go with unencrypted HTTP/2,
	// Envoy, gRPC servers). HTTP/2 frames every body, so writes keep their
	// connections whatever the upstream does with a body it does not
	// read. Default false.
	H2C bool `yaml:"h2c"`
}

// S3 is an S3 upstream; see adapters/s3.
type S3 struct {
	// Endpoint is the S3 endpoint URL.
	Endpoint string `yaml:"endpoint"`
	// Region is the signing region.
	Region string `yaml:"region"`
	// AccessKeyID is the gateway's own key, which it re-signs forwarded
	// requests with.
	AccessKeyID string `yaml:"access_key_id"`
	// SecretAccessKey is the secret of AccessKeyID.
	SecretAccessKey string `yaml:"secret_access_key"`
	// Clients are the worker keys.
	Clients []S3Client `yaml:"clients"`
	// Timeout bounds one forwarded request. Default 30s.
	Timeout time.Duration `yaml:"timeout" jsonschema:"default=30s"`
	// VirtualHostSuffix enables virtual-hosted requests: the bucket is the
	// host label before this suffix (e.g. "s3.internal").
	VirtualHostSuffix string `yaml:"virtual_host_suffix"`
	// CheckBucket, if set, is a bucket where the gateway may write and
	// delete a probe object at start (and `fencegate doctor`) to verify
	// that the upstream honours conditional writes.
	CheckBucket string `yaml:"check_bucket"`
	// Stamp writes each admitted write's token into the object's metadata
	// (StampHeader), so that `fencegate fence rebuild` can raise lost fences
	// again from the bucket itself (docs/recovery.md).
	Stamp bool `yaml:"stamp"`
	// StampHeader is the metadata header of the stamp. Default
	// x-amz-meta-fencing-token.
	StampHeader string `yaml:"stamp_header" jsonschema:"default=x-amz-meta-fencing-token"`
	// BucketConfig is what the gateway does with bucket configuration
	// writes (a PUT, DELETE or POST on a bucket with a subresource:
	// ?lifecycle, ?versioning, ?policy, ?acl, ...), which can change or
	// expose every object of the bucket: "refuse" (default; 403
	// AccessDenied) or "fence" (fenced on the bucket's key, like
	// CreateBucket and DeleteBucket). docs/s3.md.
	BucketConfig string `yaml:"bucket_config" jsonschema:"enum=refuse,enum=fence,default=refuse"`
	// FoldTrailingSlash fences the key "K/" as "K" (one fence), for a
	// store that reads both as one object: VersityGW's posix backend does
	// for tags, retention and legal hold. Default false: the two keys have
	// their own fences, and a settings write (tagging, ACL, retention,
	// legal hold, restore) is admitted on both. docs/s3.md.
	FoldTrailingSlash bool `yaml:"fold_trailing_slash"`
}

// S3Client is a worker key the gateway verifies SigV4 signatures with.
type S3Client struct {
	// AccessKeyID is a worker's key id.
	AccessKeyID string `yaml:"access_key_id"`
	// SecretAccessKey is that worker's secret.
	SecretAccessKey string `yaml:"secret_access_key"`
}

// Store selects the durable store: embedded (default), postgres or etcd.
type Store struct {
	// Embedded is the single-file store (default).
	Embedded *Embedded `yaml:"embedded"`
	// Postgres is the PostgreSQL store (several processes, shared fence
	// mode).
	Postgres *Postgres `yaml:"postgres"`
	// Etcd is an etcd cluster (shared fence mode only, etcdstore.go).
	Etcd *EtcdStore `yaml:"etcd"`
	// IdentityFile is the file recording which store this process serves
	// from, so that a start on a lost (new, empty) store is refused until
	// fences are imported, rebuilt or the loss is accepted
	// (docs/recovery.md). Default: "<embedded.path>.marker" (the name it
	// had when the field was called marker); none for postgres unless set;
	// "none" turns the check off.
	IdentityFile string `yaml:"identity_file"`
	// Marker is the deprecated spelling of identity_file (a warning; an
	// error if both are set and differ).
	Marker string `yaml:"marker"`
}

// Embedded is the single-file store (bbolt).
type Embedded struct {
	// Path is the bbolt file, opened exclusively.
	Path string `yaml:"path" jsonschema:"default=./data/fencegate.db"`
}

// Postgres is the PostgreSQL store.
type Postgres struct {
	// URL is the PostgreSQL connection URL, e.g. "${DATABASE_URL}".
	URL string `yaml:"url"`
	// MaxConns caps the pool. Default 4 in shared fence mode (advances,
	// drains and the coordinator; writes in flight hold none, see
	// fence.marker_conns), else pgx's default.
	MaxConns int32 `yaml:"max_conns"`
	// Timeout bounds one statement (and lock waits). Default 5s.
	Timeout time.Duration `yaml:"timeout" jsonschema:"default=5s"`
	// OnRegression is what a process does when it finds the store went
	// back (an asynchronous standby promoted, an older backup restored):
	// "refuse" (default) refuses fenced writes and token issuance until an
	// operator runs `fencegate fence recover`; "recover" runs that
	// recovery itself (docs/recovery.md).
	OnRegression string `yaml:"on_regression" jsonschema:"enum=refuse,enum=recover,default=refuse"`
}

// Fence selects the fence mode.
type Fence struct {
	// Mode is "local" (this process is the only gateway for its
	// resources) or "shared" (several gateways on one PostgreSQL).
	Mode string `yaml:"mode" jsonschema:"enum=local,enum=shared,default=local"`
	// CacheEntries bounds the resources a local fence keeps in memory
	// (least recently used first out).
	CacheEntries int `yaml:"cache_entries" jsonschema:"default=100000"`
	// MarkerConns is the number of long-lived marker connections of a
	// shared fence (besides store.postgres.max_conns): they hold the
	// in-flight markers of every write of this replica. Default 1: one
	// session's pipelines carry every write queued meanwhile, so more only
	// split the batches.
	MarkerConns int `yaml:"marker_conns" jsonschema:"default=1"`
	// VerifyTokens refuses tokens never issued for the resource (when the
	// coordinator shares the store). Default true in that case.
	VerifyTokens *bool `yaml:"verify_tokens"`
	// FenceOnIssue raises the fence when the coordinator issues a token.
	// Default true when the coordinator shares the store.
	FenceOnIssue *bool `yaml:"fence_on_issue"`
	// MaxAdvance caps how far one write whose token is not verified, or
	// one hand advance, may raise a fence: above the current highest (a
	// write, an advance without verification) or above the highest token
	// issued (an advance with verification). Default 1000000; negative:
	// no ceiling. See listeners.go.
	MaxAdvance int64 `yaml:"max_advance" jsonschema:"default=1000000" jsonschema_extras:"signed=true"`
}

// Coordinator is the lease service.
type Coordinator struct {
	// Enabled runs the lease coordinator.
	Enabled bool `yaml:"enabled" jsonschema:"default=false"`
	// Listen is the coordinator API's listen address.
	Listen string `yaml:"listen" jsonschema:"default=127.0.0.1:8081"`
	// DefaultTTL is the lease time of a request without ttl.
	DefaultTTL time.Duration `yaml:"default_ttl" jsonschema:"default=30s"`
	// MaxTTL is the longest ttl a request may ask (invalid_request beyond).
	MaxTTL time.Duration `yaml:"max_ttl" jsonschema:"default=10m"`
	// MaxWait is the longest wait a request may ask (invalid_request beyond).
	MaxWait time.Duration `yaml:"max_wait" jsonschema:"default=1m"`
	// Auth protects the coordinator API.
	Auth     *Auth `yaml:"auth"`
	APIGuard `yaml:",inline"`
}

// Admin is the operator listener: /healthz /readyz /metrics /v1/fences.
type Admin struct {
	// Listen is the admin API's listen address; "" disables it.
	Listen string `yaml:"listen" jsonschema:"default=127.0.0.1:9090"`
	// Auth protects the admin API; /healthz and /readyz stay open for probes.
	Auth     *Auth `yaml:"auth"`
	APIGuard `yaml:",inline"`
	// JaegerUI, if set (e.g. http://127.0.0.1:16686), makes the console link
	// each recent refusal to its trace in that Jaeger UI.
	JaegerUI string `yaml:"jaeger_ui"`
	// RecentRefusals is how many refusals the console keeps in memory.
	// Default 200; at most 100000.
	RecentRefusals int `yaml:"recent_refusals" jsonschema:"default=200,maximum=100000"`
}

// TLS configures the listeners' certificates.
type TLS struct {
	// Mode is where listener certificates come from: "off", "files"
	// (CertFile, KeyFile) or "acme".
	Mode string `yaml:"mode" jsonschema:"enum=off,enum=files,enum=acme,default=off"`
	// CertFile is the PEM certificate of mode files, reloaded when it
	// changes.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM key of mode files.
	KeyFile string `yaml:"key_file"`
	// ACME configures mode acme.
	ACME *ACME `yaml:"acme"`
	// Listeners get TLS: gateway, coordinator, admin. Default [gateway].
	Listeners []string `yaml:"listeners" jsonschema:"enum=gateway,enum=coordinator,enum=admin"`
	// ClientCAFile, if set, asks clients for a certificate and verifies it
	// against these roots; auth.client_certs then names identities.
	ClientCAFile string `yaml:"client_ca_file"`
}

// ACME obtains the listeners' certificates with certmagic.
type ACME struct {
	// Domains are the names to obtain certificates for.
	Domains []string `yaml:"domains"`
	// Email is the ACME account's e-mail address.
	Email string `yaml:"email"`
	// CA is the ACME directory URL. Default Let's Encrypt; use the
	// staging CA for trials.
	CA string `yaml:"ca"`
	// TrustedRoots are PEM roots to trust the CA with (test CAs).
	TrustedRoots string `yaml:"trusted_roots"`
	// Challenges enabled: http-01, tls-alpn-01 (default both).
	Challenges []string `yaml:"challenges" jsonschema:"enum=http-01,enum=tls-alpn-01"`
	// HTTPListen serves HTTP-01 challenges and redirects everything else
	// to HTTPS. Default ":80" when http-01 is enabled.
	HTTPListen string `yaml:"http_listen"`
}

// Telemetry configures tracing.
type Telemetry struct {
	// OTLPEndpoint is the OTLP/HTTP endpoint traces are sent to; empty:
	// tracing off.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// ServiceName is the service name of the spans.
	ServiceName string `yaml:"service_name" jsonschema:"default=fencegate"`
}

// Log configures structured logs.
type Log struct {
	// Level is the lowest level logged.
	Level string `yaml:"level" jsonschema:"enum=debug,enum=info,enum=warn,enum=error,default=info"`
	// Format is the log line format.
	Format string `yaml:"format" jsonschema:"enum=json,enum=text,default=json"`
	// Access logs one line per request (method, path, route, status,
	// bytes, duration, token, decision, trace_id). Default false.
	Access bool `yaml:"access" jsonschema:"default=false"`
}

// Defaults of the listeners' HTTP servers. The gateway's can be set in the
// file; the operator listeners (server/listeners.go) use them as they are.
const (
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultShutdownTimeout   = 30 * time.Second
)

// DefaultConfig is the configuration before the file is applied.
func DefaultConfig() *Config {
	return &Config{
		Store:       Store{},
		Fence:       Fence{Mode: "local"},
		Coordinator: Coordinator{Listen: "127.0.0.1:8081", DefaultTTL: coordinator.DefaultLeaseTTL, MaxTTL: coordinator.DefaultMaxTTL, MaxWait: coordinator.DefaultMaxWait},
		Admin:       Admin{Listen: "127.0.0.1:9090"},
		TLS:         TLS{Mode: "off"},
		Telemetry:   Telemetry{ServiceName: "fencegate"},
		Log:         Log{Level: "info", Format: "json"},
	}
}

// Defaults that depend on what the file set.
func (c *Config) applyDefaults() {
	c.applyEdgeDefaults()
	c.applyListenerDefaults()
	if c.Store.Embedded == nil && c.Store.Postgres == nil && c.Store.Etcd == nil {
		c.Store.Embedded = &Embedded{}
	}
	c.applyEtcdStoreDefaults()
	if c.Store.Embedded != nil && c.Store.Embedded.Path == "" {
		c.Store.Embedded.Path = "./data/fencegate.db"
	}
	if c.Store.IdentityFile == "" {
		c.Store.IdentityFile = c.Store.Marker // the deprecated spelling
	}
	if c.Store.IdentityFile == "" && c.Store.Embedded != nil {
		c.Store.IdentityFile = c.Store.Embedded.Path + ".marker"
	}
	if p := c.Store.Postgres; p != nil && p.Timeout == 0 {
		p.Timeout = fencegate.DefaultStoreTimeout
	}
	if p := c.Store.Postgres; p != nil && p.MaxConns == 0 && c.Fence.Mode == "shared" {
		// Advances and drains; writes in flight hold no connection.
		p.MaxConns = 4
	}
	if c.Fence.Mode == "shared" && c.Fence.MarkerConns == 0 {
		c.Fence.MarkerConns = 1
	}
	if c.Fence.Mode == "" {
		c.Fence.Mode = "local"
	}
	g := c.Gateway
	if g == nil {
		return
	}
	if g.Listen == "" {
		g.Listen = "127.0.0.1:8080"
	}
	if g.TokenHeader == "" {
		g.TokenHeader = fencegate.DefaultTokenHeader
	}
	if g.MaxHeaderBytes == 0 {
		g.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if g.ReadHeaderTimeout == 0 {
		g.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if g.IdleTimeout == 0 {
		g.IdleTimeout = DefaultIdleTimeout
	}
	if g.ShutdownTimeout == 0 {
		g.ShutdownTimeout = DefaultShutdownTimeout
	}
	if g.FastPath == nil {
		g.FastPath = new(bool)
	}
	for i := range g.Routes {
		r := &g.Routes[i]
		// Method names in the file are the operator's, not a client's:
		// they are upper-cased like they always were. Requests are compared
		// case-sensitively (the gateway refuses lower-case methods).
		for _, ms := range [][]string{r.FencedMethods, r.Match.Methods, r.ExtensionMethods} {
			for j, m := range ms {
				ms[j] = strings.ToUpper(m)
			}
		}
		if r.Upstream != nil && r.Upstream.Timeout == 0 {
			r.Upstream.Timeout = fencegate.DefaultUpstreamTimeout
		}
		for _, s := range r.ObjectStores() {
			if t := s.timeout(); *t == 0 {
				*t = fencegate.DefaultUpstreamTimeout
			}
		}
		if r.DrainTimeout == 0 {
			r.DrainTimeout = r.UpstreamTimeout() + fencegate.DrainMargin
		}
		if r.ForwardToken == nil {
			t := true
			r.ForwardToken = &t
		}
	}
}

// TemplateVar reports whether the route's upstream supplies the resource
// template variable name (object-store routes: S3 bucket and key).
func (r *Route) TemplateVar(name string) bool {
	s := r.ObjectStore()
	return s != nil && s.TemplateVar(name)
}

// UpstreamTimeout is the route's forward timeout, whichever upstream it has.
func (r *Route) UpstreamTimeout() time.Duration {
	if r.Upstream != nil {
		return r.Upstream.Timeout
	}
	if s := r.ObjectStore(); s != nil {
		return *s.timeout()
	}
	return fencegate.DefaultUpstreamTimeout
}

// Load reads, expands, decodes and validates the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse is Load for bytes already read; name is used in error messages.
// The environment is expanded into parsed values (see env.go); every error
// names the file and line, and none prints a value taken from the
// environment.
func Parse(name string, data []byte) (*Config, error) {
	src, body, err := parseSource(name, data)
	if err != nil {
		return nil, err
	}
	cfg := DefaultConfig()
	if body != nil {
		var errs Errors
		src.checkScalars(body, reflect.TypeOf(cfg), &errs)
		if len(errs) > 0 {
			return nil, errs
		}
		if err := yaml.NodeToValue(body, cfg, yaml.Strict()); err != nil {
			return nil, newDecodeError(src, err)
		}
	}
	cfg.src = src
	cfg.applyDefaults()
	if errs := cfg.Validate(); len(errs) > 0 {
		src.locate(errs)
		return nil, errs
	}
	return cfg, nil
}

// FieldError is one validation problem.
type FieldError struct {
	File  string
	Line  int
	Field string // YAML path, e.g. gateway.routes[0].upstream.url
	Msg   string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found; it is returned as one error.
type Errors []*FieldError

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// locate fills in file and line for each problem from the YAML AST and
// replaces values from the environment in its message by their reference.
func (src *source) locate(errs []*FieldError) {
	for _, e := range errs {
		e.File = src.name
		e.Msg = src.redact(e.Msg, e.Field)
		if src.file == nil {
			continue
		}
		// Walk up the field path until a node exists (a missing field is
		// reported at its parent).
		for p := e.Field; p != "" && e.Line == 0; p = parentPath(p) {
			yp, err := yaml.PathString("$." + p)
			if err != nil {
				continue
			}
			if n, err := yp.FilterFile(src.file); err == nil && n != nil {
				e.Line = n.GetToken().Position.Line
			}
		}
	}
}

func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i <= 0 {
		return ""
	}
	return p[:i]
}

// Validate reports every problem in c; it has no side effects. It expects
// defaults to have been applied (Parse does that).
func (c *Config) Validate() Errors {
	var errs Errors
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	errs = append(errs, c.validateEdges()...)
	errs = append(errs, c.validateListeners()...)
	errs = append(errs, c.validateListenAddrs()...)
	errs = append(errs, c.validateTokenSources()...)
	errs = append(errs, c.validateStoreKind()...) // etcdstore.go
	if m := c.Store.Marker; m != "" && m != c.Store.IdentityFile {
		add("store.marker", "the deprecated spelling of store.identity_file, set to another file (%q, %q): keep identity_file only", m, c.Store.IdentityFile)
	}
	if p := c.Store.Postgres; p != nil {
		if p.URL == "" {
			add("store.postgres.url", "required")
		} else if _, err := url.Parse(p.URL); err != nil && !strings.Contains(p.URL, "=") {
			add("store.postgres.url", "not a URL or key=value connection string")
		}
		switch p.OnRegression {
		case "", "refuse", "recover":
		default:
			add("store.postgres.on_regression", "must be refuse or recover, got %q", p.OnRegression)
		}
	}
	switch c.Fence.Mode {
	case "local":
	case "shared":
		if c.Store.Postgres == nil && c.Store.Etcd == nil {
			add("fence.mode", "shared needs store.postgres or store.etcd (several gateways share one store)")
		}
		if n := c.Fence.MarkerConns; n < 1 || n > 64 {
			add("fence.marker_conns", "must be between 1 and 64, not %d", n)
		}
	default:
		add("fence.mode", "must be local or shared, not %q", c.Fence.Mode)
	}
	if e := c.Telemetry.OTLPEndpoint; e != "" {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("telemetry.otlp_endpoint", "must be an http(s) URL of an OTLP/HTTP receiver, e.g. http://127.0.0.1:4318")
		}
	}
	if c.Coordinator.Enabled {
		if c.Coordinator.Listen == "" {
			add("coordinator.listen", "required when the coordinator is enabled")
		}
		if c.Coordinator.DefaultTTL <= 0 || c.Coordinator.MaxTTL < c.Coordinator.DefaultTTL {
			add("coordinator", "need 0 < default_ttl <= max_ttl")
		}
		if c.Coordinator.MaxWait < 0 {
			add("coordinator.max_wait", "must not be negative (0: the default, 1m)")
		}
	}
	switch c.TLS.Mode {
	case "off", "":
	case "files":
		if c.TLS.CertFile == "" || c.TLS.KeyFile == "" {
			add("tls", "mode files needs cert_file and key_file")
		}
	case "acme":
		if c.TLS.ACME == nil || len(c.TLS.ACME.Domains) == 0 {
			add("tls.acme.domains", "mode acme needs at least one domain")
		}
	default:
		add("tls.mode", "must be off, files or acme, not %q", c.TLS.Mode)
	}
	if u := c.Admin.JaegerUI; u != "" {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" || pu.User != nil {
			add("admin.jaeger_ui", "must be an http(s) URL of a Jaeger UI without credentials, e.g. http://127.0.0.1:16686")
		}
	}
	if n := c.Admin.RecentRefusals; n < 0 || n > 100000 {
		add("admin.recent_refusals", "must be between 0 (default 200) and 100000")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		add("log.level", "must be debug, info, warn or error")
	}
	switch c.Log.Format {
	case "json", "text":
	default:
		add("log.format", "must be json or text")
	}
	if c.Gateway == nil {
		if !c.Coordinator.Enabled {
			add("gateway", "nothing to run: configure a gateway or enable the coordinator")
		}
		return errs
	}
	g := c.Gateway
	if err := gateway.CheckTokenHeader(g.TokenHeader); err != nil {
		add("gateway.token_header", "%v", err)
	}
	if g.MaxHeaderBytes < 0 {
		add("gateway.max_header_bytes", "must not be negative")
	}
	// A negative timeout would mean none at all: a slowloris client could
	// hold connections open for ever, a shutdown never end.
	for _, t := range []struct {
		field string
		d     time.Duration
	}{{"read_header_timeout", g.ReadHeaderTimeout}, {"idle_timeout", g.IdleTimeout}, {"shutdown_timeout", g.ShutdownTimeout}} {
		if t.d < 0 {
			add("gateway."+t.field, "must not be negative (0: the default)")
		}
	}
	if len(g.Routes) == 0 {
		add("gateway.routes", "at least one route is required")
	}
	names := map[string]bool{}
	for i := range g.Routes {
		r := &g.Routes[i]
		f := fmt.Sprintf("gateway.routes[%d]", i)
		if r.Name == "" {
			add(f+".name", "required")
		} else if names[r.Name] {
			add(f+".name", "duplicate route name %q", r.Name)
		}
		names[r.Name] = true
		if r.Match.PathPrefix != "" && !strings.HasPrefix(r.Match.PathPrefix, "/") {
			add(f+".match.path_prefix", "must start with /")
		}
		if r.Match.PathPrefix != "" {
			if _, err := CleanPrefix(r.Match.PathPrefix); err != nil {
				add(f+".match.path_prefix", "%v", err)
			}
		}
		errs = append(errs, r.validateMethods(f)...)
		stores := r.ObjectStores()
		switch {
		case len(stores) > 1 || (r.Upstream != nil && len(stores) > 0):
			add(f, "set only one of %s", wordList(append([]string{"upstream"}, ObjectStoreKinds()...), "and"))
		case len(stores) == 1:
			errs = append(errs, stores[0].validate(f, r)...)
		case r.Upstream == nil:
			add(f+".upstream", "required (or %s)", wordList(ObjectStoreKinds(), "or"))
		default:
			u, err := url.Parse(r.Upstream.URL)
			switch {
			case r.Upstream.URL == "":
				add(f+".upstream.url", "required")
			case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
				add(f+".upstream.url", "must be an absolute http or https URL, got %q", r.Upstream.URL)
			case u.RawQuery != "" || u.Fragment != "":
				add(f+".upstream.url", "must not have a query or fragment")
			}
			if r.Upstream.Timeout < 0 {
				add(f+".upstream.timeout", "must not be negative")
			}
			if r.Upstream.H2C && err == nil && u.Scheme != "http" {
				add(f+".upstream.h2c", "is HTTP/2 over cleartext, for an http:// url (an https upstream negotiates HTTP/2 itself)")
			}
			if cp := r.Upstream.CheckPath; cp != "" && (!strings.HasPrefix(cp, "/") || strings.ContainsAny(cp, "?#") || strings.Contains(cp, "..")) {
				add(f+".upstream.check_path", "must be an absolute path without query, fragment or .., got %q", cp)
			}
		}
		store := r.ObjectStore()
		switch r.Precondition {
		case "", "none":
		case "generation", "etag":
			switch {
			case store != nil && store.Precondition() != r.Precondition:
				// A version is what the store compares: an ETag, a
				// generation.
				add(f+".precondition", "a %s route compares %ss: use precondition: %s", store.Kind(), store.Precondition(), store.Precondition())
			case store != nil:
				// The section's validation checks the resource names one
				// object.
			case r.Precondition == "generation":
				add(f+".precondition", "generation is for object-store routes whose store compares generations (gcs)")
			case r.Upstream == nil:
				add(f+".precondition", "etag needs an upstream or an object-store section")
			case !strings.Contains(r.Resource, "{path}"):
				// One fence must be one upstream object: a key spanning
				// several paths ({path.1}, a header) has no one ETag.
				add(f+".precondition", "etag on an upstream route needs a resource naming one object, with {path}")
			}
		default:
			add(f+".precondition", "must be etag or none (or generation on gcs routes)")
		}
		if r.Resource == "" {
			add(f+".resource", "required (e.g. \"{path}\")")
		} else if t, err := resource.ParseTemplate(r.Resource, r.TemplateVar); err != nil {
			add(f+".resource", "%v", err)
		} else if t.Uses("host") && r.Match.Host == "" {
			// The upstream acts on its own host whatever the client sent;
			// a key following the client's Host would give one object as
			// many fences as there are spellings of a host name.
			add(f+".resource", "{host} needs match.host: without a pinned host the key would follow the client's Host header")
		}
		if r.MaxBodyBytes < 0 {
			add(f+".max_body_bytes", "must not be negative")
		}
		if r.DrainTimeout < 0 {
			add(f+".drain_timeout", "must not be negative")
		}
		if r.KeyVersion < 0 {
			add(f+".key_version", "must not be negative")
		}
	}
	return errs
}

// CleanPrefix validates a path_prefix and returns it in canonical form.
func CleanPrefix(p string) (string, error) {
	if strings.Contains(p, "//") || strings.Contains(p, "/./") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") || strings.HasSuffix(p, "/.") {
		return "", fmt.Errorf("path_prefix %q is not in canonical form", p)
	}
	if strings.ContainsAny(p, "%\\?#") {
		return "", fmt.Errorf("path_prefix %q must not contain %%, \\, ? or #", p)
	}
	return p, nil
}

// validateMethods checks the route's method names: every name a valid
// token; extension_methods only names outside the registry; fenced_methods
// and match.methods only names the route knows; fenced_methods no reads
// (it narrows the default, which never fences them; fence_reads does).
func (r *Route) validateMethods(f string) Errors {
	var errs Errors
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	ext := map[string]bool{}
	for j, m := range r.ExtensionMethods {
		fj := fmt.Sprintf("%s.extension_methods[%d]", f, j)
		switch {
		case !methodToken(m):
			add(fj, "%q is not a valid HTTP method name", m)
		case fencegate.KnownMethod(m):
			add(fj, "%s is a registered method; it needs no declaration", m)
		}
		ext[m] = true
	}
	known := func(m string) bool { return fencegate.KnownMethod(m) || ext[m] }
	for j, m := range r.FencedMethods {
		fj := fmt.Sprintf("%s.fenced_methods[%d]", f, j)
		switch {
		case !methodToken(m):
			add(fj, "%q is not a valid HTTP method name", m)
		case fencegate.ReadMethod(m):
			add(fj, "%s is a read and is never fenced by fenced_methods; use fence_reads: true to fence reads", m)
		case !known(m):
			add(fj, "unknown method %s (declare extension methods in extension_methods)", m)
		}
	}
	for j, m := range r.Match.Methods {
		fj := fmt.Sprintf("%s.match.methods[%d]", f, j)
		switch {
		case !methodToken(m):
			add(fj, "%q is not a valid HTTP method name", m)
		case !known(m):
			add(fj, "unknown method %s (declare extension methods in extension_methods)", m)
		}
	}
	return errs
}
