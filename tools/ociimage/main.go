// Command ociimage builds fencegate's container image without a container
// engine: the static binary, an /etc/passwd entry for the unprivileged user
// and the build host's CA certificates as one layer on an empty (scratch)
// base, with the configuration deploy/Dockerfile gives its image (user,
// entrypoint, command, ports, OCI labels). The result is an OCI image
// layout packed in a tar file, which `docker load`, `podman load` and
// `skopeo copy oci-archive:...` read. scripts/image.sh runs it; the test in
// this directory checks what it wrote.
//
//	ociimage -binary FILE -version V -commit SHA -out IMAGE.tar
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
)

var (
	entrypoint   = []string{"/usr/local/bin/fencegate"}
	cmd          = []string{"serve", "-c", "/etc/fencegate/fencegate.yaml"}
	exposedPorts = []string{"8080/tcp", "8081/tcp", "9090/tcp"}
)

func main() {
	binary := flag.String("binary", "", "static fencegate `binary` for linux")
	version := flag.String("version", "dev", "version for the labels")
	commit := flag.String("commit", "unknown", "VCS revision for the labels")
	certs := flag.String("certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to include; skipped when absent")
	arch := flag.String("arch", runtime.GOARCH, "GOARCH the binary was built for")
	created := flag.Int64("created", 0, "image creation time, Unix seconds (default: SOURCE_DATE_EPOCH or 0), for reproducible images")
	out := flag.String("out", "", "OCI archive (tar) to write")
	flag.Parse()
	if *binary == "" || *out == "" || flag.NArg() != 0 {
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
	if err := build(*binary, *certs, *version, *commit, *arch, time.Unix(ts, 0).UTC(), *out); err != nil {
		fail(err)
	}
	fmt.Printf("ociimage: wrote %s (fencegate %s, commit %s, %s)\n", *out, *version, *commit, *arch)
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
			return file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"))
		},
		func() error { return file("etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n")) },
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

func build(binary, certs, version, commit, arch string, created time.Time, out string) error {
	layerTar, err := rootfs(binary, certs, created)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
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
		Env:          []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=/" + certsPath},
		ExposedPorts: ports,
		Labels:       labels,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return err
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
	ref := "fencegate:" + version
	if err := p.AppendImage(img,
		layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": version,
			"io.containerd.image.name":          ref,
		}),
		layout.WithPlatform(v1.Platform{OS: "linux", Architecture: arch})); err != nil {
		return err
	}
	return tarDir(dir, out, created)
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
