package etcd_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencegate/fencegate/resource"
)

// A worker that keeps its etcd lock and writes through a gateway route with
// token_source: {etcd: {endpoints: [...], prefix: /fencegate/locks}}. The
// token is the lock key's create revision; Mutex.Header().Revision is not
// (after a wait it is the revision of a later read).
func Example_worker() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
	if err != nil {
		panic(err)
	}
	defer sess.Close()

	ctx := context.Background()
	m := concurrency.NewMutex(sess, resource.LockName("/fencegate/locks", "/orders/7"))
	if err := m.Lock(ctx); err != nil {
		panic(err)
	}
	defer m.Unlock(ctx)
	key, err := cli.Get(ctx, m.Key())
	if err != nil || len(key.Kvs) == 0 {
		panic("lock lost")
	}
	token := key.Kvs[0].CreateRevision

	req, _ := http.NewRequestWithContext(sess.Ctx(), "PUT", "http://127.0.0.1:8080/orders/7", strings.NewReader("shipped"))
	req.Header.Set("Fencing-Token", strconv.FormatInt(token, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusConflict {
		// stale_fencing_token: a newer holder has written; stop, do not
		// retry with this token.
		return
	}
	fmt.Println(resp.Status)
}
