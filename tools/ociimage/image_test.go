package main

import (
	"archive/tar"
	"bufio"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// image returns the OCI archive to check and the version and commit it
// must carry: the one scripts/image.sh --check names, or one this test
// builds with scripts/image.sh.
func image(t *testing.T) (path, version, commit string) {
	if p := os.Getenv("FENCEGATE_IMAGE"); p != "" {
		return p, os.Getenv("FENCEGATE_IMAGE_VERSION"), os.Getenv("FENCEGATE_IMAGE_COMMIT")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "image.tar")
	cmd := exec.Command("bash", filepath.Join(root, "scripts/image.sh"), path)
	cmd.Env = append(os.Environ(), "VERSION=v0.0.0-imagetest")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/image.sh: %v\n%s", err, b)
	}
	c := exec.Command("git", "rev-parse", "HEAD")
	c.Dir = root
	b, err := c.Output()
	if err != nil {
		t.Fatal(err)
	}
	return path, "v0.0.0-imagetest", strings.TrimSpace(string(b))
}

// untar unpacks the OCI archive into a directory for layout.
func untar(t *testing.T, archive string) string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return dir
		}
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(name, dir+string(filepath.Separator)) {
			t.Fatalf("archive entry %q escapes the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(name, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(name, b, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("archive entry %q of type %c", h.Name, h.Typeflag)
		}
	}
}

// dockerfile reads the instructions of deploy/Dockerfile's final stage
// that the image must share (USER, ENTRYPOINT, CMD, EXPOSE, WORKDIR, ENV).
func dockerfile(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open("../../deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		word, rest, _ := strings.Cut(line, " ")
		switch word {
		case "FROM":
			clear(got) // only the last stage counts
		case "USER", "ENTRYPOINT", "CMD", "EXPOSE", "WORKDIR", "ENV":
			got[word] = strings.TrimSpace(rest)
		}
	}
	return got
}

func jsonArray(t *testing.T, s string) []string {
	t.Helper()
	var a []string
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		t.Fatalf("Dockerfile exec form %q: %v", s, err)
	}
	return a
}

// archs are the architectures scripts/image.sh builds.
var archs = []string{"amd64", "arm64"}

func TestImage(t *testing.T) {
	archive, version, commit := image(t)
	top, err := layout.ImageIndexFromPath(untar(t, archive))
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 {
		t.Fatalf("%d entries in index.json; want 1, the multi-architecture index", len(tm.Manifests))
	}
	desc := tm.Manifests[0]
	if desc.MediaType != types.OCIImageIndex || desc.Annotations["org.opencontainers.image.ref.name"] != version {
		t.Fatalf("entry %s annotations %v; want an OCI image index named %s (the version is the tag)", desc.MediaType, desc.Annotations, version)
	}
	idx, err := top.ImageIndex(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	// Digests, sizes and diff ids agree with the blobs, for every image.
	if err := validate.Index(idx); err != nil {
		t.Fatalf("validate: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range im.Manifests {
		if m.Platform == nil || m.Platform.OS != "linux" || m.MediaType != types.OCIManifestSchema1 {
			t.Fatalf("manifest %s platform %v; want an OCI manifest for linux", m.MediaType, m.Platform)
		}
		got = append(got, m.Platform.Architecture)
		t.Run(m.Platform.Architecture, func(t *testing.T) {
			img, err := idx.Image(m.Digest)
			if err != nil {
				t.Fatal(err)
			}
			checkImage(t, img, m.Platform.Architecture, version, commit)
		})
	}
	if !slices.Equal(got, archs) {
		t.Errorf("architectures %v; want %v", got, archs)
	}
}

// checkImage checks one architecture's image against deploy/Dockerfile,
// and runs its binary when the host can.
func checkImage(t *testing.T, img v1.Image, arch, version, commit string) {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != "linux" || cf.Architecture != arch || c.User == "" || strings.HasPrefix(c.User, "0") || strings.HasPrefix(c.User, "root") {
		t.Fatalf("os %q arch %q user %q; want linux/%s and a non-root user", cf.OS, cf.Architecture, c.User, arch)
	}
	df := dockerfile(t)
	if c.User != df["USER"] {
		t.Errorf("user %q; Dockerfile USER %q", c.User, df["USER"])
	}
	if want := jsonArray(t, df["ENTRYPOINT"]); !slices.Equal(c.Entrypoint, want) {
		t.Errorf("entrypoint %q; Dockerfile %q", c.Entrypoint, want)
	}
	if want := jsonArray(t, df["CMD"]); !slices.Equal(c.Cmd, want) {
		t.Errorf("cmd %q; Dockerfile %q", c.Cmd, want)
	}
	if c.WorkingDir != df["WORKDIR"] {
		t.Errorf("working directory %q; Dockerfile WORKDIR %q", c.WorkingDir, df["WORKDIR"])
	}
	if want := strings.Fields(df["ENV"]); !slices.Equal(c.Env, want) {
		t.Errorf("env %q; Dockerfile ENV %q", c.Env, want)
	}
	for _, p := range strings.Fields(df["EXPOSE"]) {
		if _, ok := c.ExposedPorts[p+"/tcp"]; !ok {
			t.Errorf("port %s of the Dockerfile not exposed (%v)", p, c.ExposedPorts)
		}
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": commit,
		"org.opencontainers.image.title":    "fencegate",
		"org.opencontainers.image.licenses": "Apache-2.0",
	} {
		if got := c.Labels[k]; got != want {
			t.Errorf("label %s = %q; want %q", k, got, want)
		}
	}

	bin := contents(t, img)
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("binary of linux/%s: %v", arch, err)
	}
	machine := ef.Machine
	ef.Close()
	if want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]; machine != want {
		t.Fatalf("binary of linux/%s is for %s", arch, machine)
	}
	if arch != runtime.GOARCH {
		return // cannot run here
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("fencegate version from the image: %v\n%s", err, out)
	}
	if want := "fencegate " + version + " (commit " + commit; !strings.HasPrefix(string(out), want) {
		t.Fatalf("fencegate version from the image: %q; want prefix %q", out, want)
	}
}

// TestDockerfileFiles: deploy/Dockerfile builds the same files as this
// builder: the same /etc/passwd and /etc/group, on an empty base.
func TestDockerfileFiles(t *testing.T) {
	b, err := os.ReadFile("../../deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	d := string(b)
	for _, want := range []string{
		"FROM scratch",
		"printf '" + strings.ReplaceAll(passwd, "\n", `\n`) + "'",
		"printf '" + strings.ReplaceAll(group, "\n", `\n`) + "'",
		"/" + certsPath,
		"/" + binaryPath,
	} {
		if !strings.Contains(d, want) {
			t.Errorf("deploy/Dockerfile lacks %q", want)
		}
	}
}

// contents checks the flattened filesystem and returns the binary,
// written out to run.
func contents(t *testing.T, img v1.Image) string {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	seen := map[string]*tar.Header{}
	var bin string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		seen[name] = h
		switch name {
		case binaryPath:
			bin = filepath.Join(t.TempDir(), "fencegate")
			f, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		case "etc/passwd":
			b, _ := io.ReadAll(tr)
			if !strings.Contains(string(b), "nonroot:x:65532:65532:") {
				t.Errorf("/etc/passwd has no nonroot user:\n%s", b)
			}
		}
	}
	if h := seen[binaryPath]; h == nil || h.Mode&0o111 == 0 || h.Uid != 0 {
		t.Fatalf("binary entry %+v; want a root-owned executable (the user cannot replace it)", h)
	}
	if h := seen[homeDir]; h == nil || h.Uid != uid {
		t.Errorf("home entry %+v; want a directory owned by %d", h, uid)
	}
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil && seen[certsPath] == nil {
		t.Errorf("the host has CA certificates but the image has none")
	}
	return bin
}
