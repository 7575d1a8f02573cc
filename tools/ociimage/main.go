// Command ociimage builds fencegate's container image without a container
// engine: for each architecture, the static binary, an /etc/passwd entry for
// the unprivileged user and the build host's CA certificates as one layer on
// an empty (scratch) base, with the configuration deploy/Dockerfile gives
// its image (user, entrypoint, command, ports, environment, OCI labels). The
// images go into one multi-architecture image index named by the version.
// The result is an OCI image layout packed in a tar file, which
// `skopeo copy --all oci-archive:...`, `podman load` and `docker load` read.
// scripts/image.sh runs it; the test in this directory checks what it wrote.
//
//	ociimage -binary amd64=FILE -binary arm64=FILE -version V -commit SHA -out IMAGE.tar
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed contents; deploy/Dockerfile's final stage has the same
// (the distroless :nonroot user is uid 65532).
const (
	uid        = 65532
	user       = "65532:65532"
	binaryPath = "usr/local/bin/fencegate"
	homeDir    = "home/nonroot"
	certsPath  = "etc/ssl/certs/ca-certificates.crt"
	// deploy/Dockerfile writes the same two files (its test checks).
	passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group  = "root:x:0:\nnonroot:x:65532:\n"
)

var (
	entrypoint   = []string{"/usr/local/bin/fencegate"}
	cmd          = []string{"serve", "-c", "/etc/fencegate/fencegate.yaml"}
	exposedPorts = []string{"8080/tcp", "8081/tcp", "9090/tcp"}
	env          = []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=/" + certsPath}
)

// binaries is the repeated -binary flag: [ARCH=]FILE.
type binaries []struct{ arch, file string }

func (b *binaries) String() string { return fmt.Sprint(*b) }

func (b *binaries) Set(v string) error {
	arch, file, ok := strings.Cut(v, "=")
	if !ok {
		arch, file = "", v
	}
	*b = append(*b, struct{ arch, file string }{arch, file})
	return nil
}

func main() {
	var bins binaries
	flag.Var(&bins, "binary", "static fencegate binary for linux, as `ARCH=FILE` (repeat for each architecture; FILE alone: -arch)")
	version := flag.String("version", "dev", "version for the labels")
	commit := flag.String("commit", "unknown", "VCS revision for the labels")
	certs := flag.String("certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to include; skipped when absent")
	arch := flag.String("arch", runtime.GOARCH, "GOARCH of a -binary given without ARCH=")
	created := flag.Int64("created", 0, "image creation time, Unix seconds (default: SOURCE_DATE_EPOCH or 0), for reproducible images")
	out := flag.String("out", "", "OCI archive (tar) to write")
	flag.Parse()
	if len(bins) == 0 || *out == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	ts := *created
	if ts == 0 {
		if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				fail(fmt.Errorf("SOURCE_DATE_EPOCH: %w", err))
			}
			ts = n
		}
	}
	var archs []string
	for i := range bins {
		if bins[i].arch == "" {
			bins[i].arch = *arch
		}
		archs = append(archs, bins[i].arch)
	}
	if err := build(bins, *certs, *version, *commit, time.Unix(ts, 0).UTC(), *out); err != nil {
		fail(err)
	}
	fmt.Printf("ociimage: wrote %s (fencegate %s, commit %s, linux/%s)\n", *out, *version, *commit, strings.Join(archs, ", linux/"))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "ociimage:", err)
	os.Exit(1)
}

// rootfs is the single layer: a tar of the files the binary needs.
func rootfs(binary, certs string, mtime time.Time) ([]byte, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(certs)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64, owner int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: owner, Gid: owner, ModTime: mtime, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	steps := []func() error{
		func() error { return dir("etc", 0o755, 0) },
		func() error {
			return file("etc/passwd", 0o644, []byte(passwd))
		},
		func() error { return file("etc/group", 0o644, []byte(group)) },
		func() error { return dir("home", 0o755, 0) },
		func() error { return dir(homeDir, 0o700, uid) },
		func() error { return dir("tmp", 0o1777, 0) },
		func() error { return dir("usr", 0o755, 0) },
		func() error { return dir("usr/local", 0o755, 0) },
		func() error { return dir("usr/local/bin", 0o755, 0) },
		func() error { return file(binaryPath, 0o755, bin) },
	}
	if ca != nil {
		steps = append(steps,
			func() error { return dir("etc/ssl", 0o755, 0) },
			func() error { return dir("etc/ssl/certs", 0o755, 0) },
			func() error { return file(certsPath, 0o644, ca) })
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// build writes the image index of bins, one image per architecture.
func build(bins binaries, certs, version, commit string, created time.Time, out string) error {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, b := range bins {
		img, err := archImage(b.file, certs, version, commit, b.arch, created)
		if err != nil {
			return fmt.Errorf("linux/%s: %w", b.arch, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: b.arch}}})
	}
	dir, err := os.MkdirTemp("", "ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": version,
		"io.containerd.image.name":          "fencegate:" + version,
	})); err != nil {
		return err
	}
	return tarDir(dir, out, created)
}

// archImage is the image of one architecture's binary.
func archImage(binary, certs, version, commit, arch string, created time.Time) (v1.Image, error) {
	layerTar, err := rootfs(binary, certs, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture = arch
	cf.OS = "linux"
	cf.Created = v1.Time{Time: created}
	ports := map[string]struct{}{}
	for _, p := range exposedPorts {
		ports[p] = struct{}{}
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "fencegate",
		"org.opencontainers.image.description": "fencing write-gateway",
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.revision":    commit,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.source":      "https://github.com/fencegate/fencegate",
		"org.opencontainers.image.created":     created.Format(time.RFC3339),
	}
	cf.Config = v1.Config{
		User:         user,
		Entrypoint:   entrypoint,
		Cmd:          cmd,
		WorkingDir:   "/" + homeDir,
		Env:          env,
		ExposedPorts: ports,
		Labels:       labels,
	}
	return mutate.ConfigFile(img, cf)
}

// tarDir packs the layout directory into out (written atomically).
func tarDir(dir, out string, mtime time.Time) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(out), ".ociimage-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: filepath.ToSlash(rel) + "/", Mode: 0o755, ModTime: mtime})
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(data)), ModTime: mtime}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		f.Close()
		return err
	}
	return os.Rename(f.Name(), out)
}
