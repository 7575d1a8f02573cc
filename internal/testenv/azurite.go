package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
)

// Azurite's well-known development account (its documentation publishes
// the key; it guards nothing).
const (
	AzuriteAccount = "devstoreaccount1"
	AzuriteKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// AzuriteServer is Azurite's Blob service (files in a temporary
// directory, Shared Key authentication with the development account).
type AzuriteServer struct {
	Endpoint string // http://127.0.0.1:PORT/devstoreaccount1, the account's service URL
	Account  string
	Key      string
	Pid      int // the server's process (its CPU: ProcCPU)
}

// Azurite starts azurite-blob (installed by scripts/tools.sh azurite) on
// 127.0.0.1 and stops it at the end of the test.
func Azurite(t testing.TB) *AzuriteServer {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		missing(t, "node", "run scripts/deps.sh (installs nodejs and npm)")
	}
	bin := tool(t, "azurite-blob", "azurite")
	dir := t.TempDir()
	proc, ports := startServer(t, "azurite", 1, nil, bin,
		func(p []int) []string {
			// --skipApiVersionCheck: the SDKs send newer service versions
			// than the emulator names; --loose: it ignores headers it does
			// not know instead of refusing them.
			return []string{"--blobHost", "127.0.0.1", "--blobPort", fmt.Sprint(p[0]), "--location", dir,
				"--skipApiVersionCheck", "--loose", "--disableProductStyleUrl", "--silent"}
		},
		func(ctx context.Context, p *process, ports []int) error {
			return waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/%s?comp=list", ports[0], AzuriteAccount), 60*time.Second, p.done)
		})
	return &AzuriteServer{Endpoint: fmt.Sprintf("http://127.0.0.1:%d/%s", ports[0], AzuriteAccount), Account: AzuriteAccount, Key: AzuriteKey, Pid: proc.cmd.Process.Pid}
}

// Client is azblob's client of the server with the development account.
func (s *AzuriteServer) Client(t testing.TB) *azblob.Client {
	t.Helper()
	return s.ClientAt(t, s.Endpoint)
}

// ClientAt is Client sending to endpoint instead of the server's (a proxy
// in front of it, with the same path).
func (s *AzuriteServer) ClientAt(t testing.TB, endpoint string) *azblob.Client {
	t.Helper()
	cred, err := azblob.NewSharedKeyCredential(s.Account, s.Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := azblob.NewClientWithSharedKeyCredential(endpoint+"/", cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// CreateContainer creates a container.
func (s *AzuriteServer) CreateContainer(t testing.TB, name string) {
	t.Helper()
	_, err := s.Client(t).CreateContainer(context.Background(), name, nil)
	var re *azcore.ResponseError
	if err != nil && !(errors.As(err, &re) && re.ErrorCode == "ContainerAlreadyExists") {
		t.Fatalf("testenv: create container %s: %v", name, err)
	}
}

// NodeModules is the node_modules directory scripts/tools.sh azurite
// installs (@azure/storage-blob for the Node example worker); it skips or
// fails (CI=true) the test when it is missing.
func NodeModules(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		missing(t, "node", "run scripts/deps.sh (installs nodejs and npm)")
	}
	r, err := RepoRoot()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	d := filepath.Join(r, ".cache", "azurite", "node_modules")
	if _, err := os.Stat(filepath.Join(d, "@azure", "storage-blob", "package.json")); err != nil {
		missing(t, "@azure/storage-blob", "run scripts/tools.sh azurite (npm ci from tools/azurite)")
	}
	return d
}
