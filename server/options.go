package server

import (
	"github.com/fencegate/fencegate/adapters/listentls"
	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/adapters/upstreamconn"
	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/telemetry"
)

// This file is the one place where the configuration's shape meets the
// libraries: each function maps a validated config section to the options
// of the package it configures. A change of the YAML shape is a change of
// package config and of these functions, nothing else.

// RouteOptions maps a route to the gateway's compiled-route options.
func RouteOptions(rc config.Route) gateway.RouteOptions {
	return gateway.RouteOptions{
		Name:               rc.Name,
		Host:               rc.Match.Host,
		PathPrefix:         rc.Match.PathPrefix,
		Methods:            rc.Match.Methods,
		FencedMethods:      rc.FencedMethods,
		ExtensionMethods:   rc.ExtensionMethods,
		FenceReads:         rc.FenceReads,
		CaseInsensitive:    rc.CaseInsensitive,
		Resource:           rc.Resource,
		Vars:               rc.TemplateVar,
		MaxBodyBytes:       rc.MaxBodyBytes,
		Timeout:            rc.UpstreamTimeout(),
		DrainTimeout:       rc.DrainTimeout,
		MaxInflightWrites:  rc.MaxInflightWrites,
		DestinationMethods: rc.DestinationMethods,
		Hierarchical:       rc.Hierarchical,
		Collections:        rc.ObjectStore() != nil,
		// Only a plain HTTP route may send the token on: an object store
		// never gets it.
		ForwardToken: rc.Upstream != nil && rc.ForwardToken != nil && *rc.ForwardToken,
	}
}

// HTTPUpstreamOptions maps a route's `upstream:` section (forward_token is
// the route's, RouteOptions). Transport, ETags and Logger are the caller's.
func HTTPUpstreamOptions(rc config.Route) relay.Options {
	o := relay.Options{Route: rc.Name}
	if rc.Upstream != nil {
		o.URL, o.Headers, o.PreserveHost = rc.Upstream.URL, rc.Upstream.Headers, rc.Upstream.PreserveHost
	}
	return o
}

// AuthOptions maps an auth block (nil: no credentials asked).
func AuthOptions(a *config.Auth) auth.Options {
	var o auth.Options
	if a == nil {
		return o
	}
	for _, k := range a.APIKeys {
		o.APIKeys = append(o.APIKeys, auth.APIKey{Owner: k.Owner, SHA256: k.SHA256, Prefixes: k.Prefixes, BindOwner: k.BindOwner})
	}
	for _, c := range a.ClientCerts {
		o.ClientCerts = append(o.ClientCerts, auth.ClientCert{Name: c.Name, Prefixes: c.Prefixes, BindOwner: c.BindOwner})
	}
	return o
}

// TLSOptions maps the `tls:` section (the listeners' certificates).
// Storage, DataDir and Logger are the caller's.
func TLSOptions(c config.TLS) listentls.Options {
	o := listentls.Options{Mode: c.Mode, CertFile: c.CertFile, KeyFile: c.KeyFile, ClientCAFile: c.ClientCAFile}
	if a := c.ACME; a != nil {
		o.ACME = &listentls.ACME{
			Domains: a.Domains, Email: a.Email, CA: a.CA, TrustedRoots: a.TrustedRoots,
			Challenges: a.Challenges, HTTPListen: a.HTTPListen,
		}
	}
	return o
}

// UpstreamTLSOptions maps an `upstream.tls:` section.
func UpstreamTLSOptions(c *config.UpstreamTLS) upstreamconn.TLSOptions {
	return upstreamconn.TLSOptions{CAFile: c.CAFile, ServerName: c.ServerName, CertFile: c.CertFile, KeyFile: c.KeyFile}
}

// TelemetryOptions maps the `telemetry:` section.
func TelemetryOptions(c config.Telemetry) telemetry.Options {
	return telemetry.Options{OTLPEndpoint: c.OTLPEndpoint, ServiceName: c.ServiceName}
}
