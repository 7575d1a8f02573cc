package etcd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/etcd"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/resource"
)

const lockPrefix = "/fencegate/locks"

// lockHolder takes etcd's lock of res through cluster (as root) and returns
// its token, the lock key's create revision.
func lockHolder(t *testing.T, cluster *testenv.EtcdCluster, res string) int64 {
	t.Helper()
	cli, err := clientv3.New(cluster.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	// Cancelled before Close (cleanups run last first): Close would wait
	// up to the TTL to revoke the lease on a cluster that was restarted.
	sctx, cancel := context.WithCancel(context.Background())
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(30), concurrency.WithContext(sctx))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	t.Cleanup(cancel)
	m := concurrency.NewMutex(sess, resource.LockName(lockPrefix, res))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	key, err := cli.Get(ctx, m.Key())
	if err != nil || len(key.Kvs) != 1 {
		t.Fatalf("the lock key: %v %v", key, err)
	}
	return key.Kvs[0].CreateRevision
}

// TestSourceTLSAndAuth: the token source verifies a holder's token on a
// cluster that serves TLS only, asks for a client certificate and has
// authentication on; a wrong CA, a missing client certificate and a wrong
// password each fail closed with an error that says why and holds no
// secret.
func TestSourceTLSAndAuth(t *testing.T) {
	cluster := testenv.EtcdWith(t, 1, testenv.EtcdOptions{TLS: true, Auth: true})
	token := lockHolder(t, cluster, "/orders/7")
	good := etcd.ClientOptions{Endpoints: cluster.Endpoints, Username: cluster.Username, Password: cluster.Password,
		TLS: &etcd.TLS{CAFile: cluster.CAFile, CertFile: cluster.CertFile, KeyFile: cluster.KeyFile}}
	open := func(t *testing.T, o etcd.ClientOptions) *etcd.Source {
		src, err := etcd.New(etcd.Options{Client: o, Prefix: lockPrefix, Timeout: 3 * time.Second})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() { src.Close() })
		return src
	}
	ctx := context.Background()

	t.Run("verified", func(t *testing.T) {
		src := open(t, good)
		if err := src.Ping(ctx); err != nil {
			t.Fatalf("Ping: %v", err)
		}
		if err := src.VerifyToken(ctx, "/orders/7", token); err != nil {
			t.Fatalf("the holder's token %d: %v", token, err)
		}
		var unknown *fencegate.UnknownTokenError
		if err := src.VerifyToken(ctx, "/orders/8", token); !errors.As(err, &unknown) {
			t.Fatalf("the token on another lock: %v; want it unknown there", err)
		}
	})

	t.Run("user with read on the lock prefix only", func(t *testing.T) {
		cli, err := clientv3.New(cluster.ClientConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		for _, step := range []func() error{
			func() error { _, err := cli.RoleAdd(ctx, "gateway"); return err },
			func() error {
				_, err := cli.RoleGrantPermission(ctx, "gateway", lockPrefix, clientv3.GetPrefixRangeEnd(lockPrefix), clientv3.PermissionType(clientv3.PermRead))
				return err
			},
			func() error { _, err := cli.UserAdd(ctx, "gateway", "gateway-pw"); return err },
			func() error { _, err := cli.UserGrantRole(ctx, "gateway", "gateway"); return err },
		} {
			if err := step(); err != nil {
				t.Fatal(err)
			}
		}
		o := good
		o.Username, o.Password = "gateway", "gateway-pw"
		src := open(t, o)
		if err := src.Ping(ctx); err != nil {
			t.Fatalf("Ping: %v", err)
		}
		if err := src.VerifyToken(ctx, "/orders/7", token); err != nil {
			t.Fatalf("the holder's token %d: %v", token, err)
		}
	})

	for _, tt := range []struct {
		name string
		opts func(o etcd.ClientOptions) etcd.ClientOptions
		want string
	}{
		{"wrong CA", func(o etcd.ClientOptions) etcd.ClientOptions {
			tls := *o.TLS
			tls.CAFile = testenv.OtherCA(t)
			o.TLS = &tls
			return o
		}, "certificate"},
		{"no client certificate", func(o etcd.ClientOptions) etcd.ClientOptions {
			o.TLS = &etcd.TLS{CAFile: o.TLS.CAFile}
			return o
		}, "certificate"},
		{"wrong password", func(o etcd.ClientOptions) etcd.ClientOptions {
			o.Password = "not-" + o.Password
			return o
		}, "authentication failed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts(good)
			src := open(t, o)
			err := src.Ping(ctx)
			if err == nil {
				t.Fatal("Ping succeeded")
			}
			verr := src.VerifyToken(ctx, "/orders/7", token)
			var unavailable *fencegate.TokenSourceUnavailableError
			if !errors.As(verr, &unavailable) {
				t.Fatalf("VerifyToken: %v; want the source unavailable (fail closed)", verr)
			}
			for _, e := range []error{err, unavailable.Err} {
				msg := e.Error()
				if !strings.Contains(msg, tt.want) {
					t.Errorf("error %q does not say %q", msg, tt.want)
				}
				if strings.Contains(msg, cluster.Password) {
					t.Errorf("error %q holds the password", msg)
				}
			}
		})
	}
}

// TestSourceDoesNotWaitForCluster: with a username, clientv3.New logs in
// before it returns, for ever while the cluster is down; New must return
// at once and verifications fail closed until etcd answers.
func TestSourceDoesNotWaitForCluster(t *testing.T) {
	cluster := testenv.EtcdWith(t, 1, testenv.EtcdOptions{Auth: true})
	token := lockHolder(t, cluster, "/orders/7")
	cluster.StopAll()
	done := make(chan *etcd.Source, 1)
	go func() {
		src, err := etcd.New(etcd.Options{Client: etcd.ClientOptions{Endpoints: cluster.Endpoints, Username: cluster.Username, Password: cluster.Password},
			Prefix: lockPrefix, Timeout: time.Second})
		if err != nil {
			t.Errorf("New: %v", err)
		}
		done <- src
	}()
	var src *etcd.Source
	select {
	case src = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("New with a username did not return within 10s while etcd was down")
	}
	if src == nil {
		return
	}
	defer src.Close()
	var unavailable *fencegate.TokenSourceUnavailableError
	if err := src.VerifyToken(context.Background(), "/orders/7", token); !errors.As(err, &unavailable) {
		t.Fatalf("VerifyToken while etcd is down: %v; want the source unavailable", err)
	}
	cluster.RestartAll()
	// The holder's lease (30s) outlives the outage: its key still owns
	// the lock once etcd is back.
	var err error
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if err = src.VerifyToken(context.Background(), "/orders/7", token); err == nil {
			return
		}
	}
	t.Fatalf("the holder's token after etcd came back: %v", err)
}

// TestSourceTLSWithoutAuth: on a TLS cluster without authentication the
// client connects without a login, so a wrong CA shows in Ping (for
// /readyz), not in New; the error still says it is the certificate.
func TestSourceTLSWithoutAuth(t *testing.T) {
	cluster := testenv.EtcdWith(t, 1, testenv.EtcdOptions{TLS: true})
	token := lockHolder(t, cluster, "/orders/7")
	for _, tt := range []struct {
		ca   string
		want string // "" verified
	}{
		{cluster.CAFile, ""},
		{testenv.OtherCA(t), "certificate signed by unknown authority"},
	} {
		src, err := etcd.New(etcd.Options{Client: etcd.ClientOptions{Endpoints: cluster.Endpoints,
			TLS: &etcd.TLS{CAFile: tt.ca, CertFile: cluster.CertFile, KeyFile: cluster.KeyFile}}, Prefix: lockPrefix, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		err = src.Ping(context.Background())
		verr := src.VerifyToken(context.Background(), "/orders/7", token)
		switch {
		case tt.want == "" && (err != nil || verr != nil):
			t.Fatalf("the cluster's CA: Ping %v, VerifyToken %v", err, verr)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Fatalf("another CA: Ping %v; want an error saying %q", err, tt.want)
		case tt.want != "" && verr == nil:
			t.Fatal("another CA: the token was verified")
		}
	}
}
