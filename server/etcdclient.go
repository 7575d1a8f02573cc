package server

import (
	"github.com/fencegate/fencegate/adapters/etcd"
	"github.com/fencegate/fencegate/config"
)

// EtcdClientOptions are the adapter's client options of an etcd section of
// the configuration (a token source; the store's has the same fields), so
// the gateway and doctor reach a cluster the same way.
func EtcdClientOptions(endpoints []string, username, password string, t *config.EtcdTLS) etcd.ClientOptions {
	o := etcd.ClientOptions{Endpoints: endpoints, Username: username, Password: password}
	if t != nil {
		o.TLS = &etcd.TLS{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName}
	}
	return o
}

// EtcdStoreOptions are the adapter's options of store.etcd.
func EtcdStoreOptions(e *config.EtcdStore) etcd.StoreOptions {
	return etcd.StoreOptions{Client: EtcdClientOptions(e.Endpoints, e.Username, e.Password, e.TLS), Prefix: e.Prefix, Timeout: e.Timeout}
}
