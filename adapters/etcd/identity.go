package etcd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// StoreID returns the store's identity for store.identity_file
// (server/identity.go): the value of P/id, drawn by the first process that
// asks (128 random bits) and never changed. A cluster wiped or replaced, or
// the prefix deleted, answers another one, so a gateway that served from
// the old one refuses to start on it (its fences are gone) until an import,
// a rebuild or --accept-empty-store adopts it. It needs the cluster at
// start (a quorum for the Txn).
func (f *Store) StoreID(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	var b [16]byte
	rand.Read(b[:])
	id, key := hex.EncodeToString(b[:]), f.prefix+"/id"
	f.requests.Add(1)
	resp, err := f.client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, id)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return "", fmt.Errorf("load store id: %w", err)
	}
	if resp.Succeeded {
		return id, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 || len(kvs[0].Value) == 0 {
		return "", errors.New("load store id: the id key is empty")
	}
	return string(kvs[0].Value), nil
}
