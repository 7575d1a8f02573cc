package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/adapters/etcd"
	"github.com/fencegate/fencegate/config"
)

// checkEtcdStore reports the etcd cluster of store.etcd (members, quorum,
// leader, versions, auth, TLS). ok is false when there is nothing to check.
func checkEtcdStore(ctx context.Context, cfg *config.Config) (ok bool, err error) {
	e := cfg.Store.Etcd
	if e == nil {
		return false, nil
	}
	st, err := etcd.OpenStore(etcd.StoreOptions{Endpoints: e.Endpoints, Prefix: e.Prefix, Username: e.Username, Password: e.Password, Timeout: e.Timeout})
	if err != nil {
		fmt.Printf("store.etcd: FAIL: %v\n", err)
		return true, err
	}
	defer st.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	lines, err := st.CheckCluster(cctx)
	for _, l := range lines {
		fmt.Printf("store.etcd: %s\n", l)
	}
	if err != nil {
		fmt.Printf("store.etcd: FAIL: %v\n", err)
		return true, err
	}
	fmt.Println("store.etcd: ok: a quorum with one leader decides the fence")
	return true, nil
}
