package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/fencegate/fencegate/config"
)

// identified is implemented by stores with an identity drawn when they were
// created (bolt: the file; postgres: the schema).
type identified interface {
	StoreID(ctx context.Context) (string, error)
}

// IdentityFile is the file a process leaves beside its state
// (store.identity_file, formerly store.marker) to record which store it
// served from. A store lost and replaced by a new,
// empty one (a deleted bolt file, a recreated database) has another
// identity: every zombie's token would look new to it, so the process
// refuses to start on it until the operator imports an export, rebuilds from
// S3 stamps (both adopt the new store) or accepts the loss.
type IdentityFile struct {
	StoreID   string    `json:"store_id"`
	Store     string    `json:"store"`
	WrittenAt time.Time `json:"written_at"`
}

// ErrStoreLost reports a start on a store other than the identity file's.
var ErrStoreLost = errors.New("fence store lost")

// identityPath is the identity file of cfg, "" if there is none.
func identityPath(cfg *config.Config) string {
	if cfg.Store.IdentityFile == "none" {
		return ""
	}
	return cfg.Store.IdentityFile
}

func storeName(cfg *config.Config) string {
	if cfg.Store.Embedded != nil {
		return "embedded:" + cfg.Store.Embedded.Path
	}
	if cfg.Store.Etcd != nil {
		return "etcd"
	}
	return "postgres"
}

// checkIdentity compares the store's identity with the identity file's. No
// file: one is written (first start, or the first since the file was added).
// A different identity refuses the start unless accept, which adopts the
// store.
func (s *Server) checkIdentity(ctx context.Context, cfg *config.Config, store any, accept bool) error {
	path := identityPath(cfg)
	st, ok := store.(identified)
	if path == "" || !ok {
		return nil
	}
	id, err := st.StoreID(ctx)
	if err != nil {
		return fmt.Errorf("store identity file: %w", err)
	}
	m, err := ReadIdentityFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return WriteIdentityFile(path, cfg, id)
	case err != nil:
		return err
	case m.StoreID == id:
		return nil
	case accept:
		s.log.Warn("starting on a store that is not the one this gateway served from; fences of the lost store are gone (--accept-empty-store)",
			"identity_file", path, "identity_file_store_id", m.StoreID, "store_id", id)
		return WriteIdentityFile(path, cfg, id)
	}
	return fmt.Errorf("%w: %s is not the store this process served from (identity file %s names store %s, written %s; this one is %s). "+
		"Its fences are gone, so every zombie's token would look new. Restore them with `fencegate fence import` (an export) "+
		"or `fencegate fence rebuild` (S3 stamps), or start with --accept-empty-store if nothing can be recovered (docs/recovery.md)",
		ErrStoreLost, storeName(cfg), path, m.StoreID, m.WrittenAt.Format(time.RFC3339), id)
}

// ReadIdentityFile reads an identity file.
func ReadIdentityFile(path string) (IdentityFile, error) {
	var m IdentityFile
	b, err := os.ReadFile(path)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil || m.StoreID == "" {
		return m, fmt.Errorf("store identity file %s is unreadable (%v): remove it only if you know the store is the one the gateway served from", path, err)
	}
	return m, nil
}

// WriteIdentityFile records id as the store of cfg, atomically (temporary file,
// fsync, rename, fsync of the directory).
func WriteIdentityFile(path string, cfg *config.Config, id string) error {
	b, err := json.MarshalIndent(IdentityFile{StoreID: id, Store: storeName(cfg), WrittenAt: time.Now().UTC()}, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("store identity file: %w", err)
	}
	f, err := os.CreateTemp(dir, ".identity-*")
	if err != nil {
		return fmt.Errorf("store identity file: %w", err)
	}
	defer os.Remove(f.Name())
	// One err for write, sync and close: a failed write must not be
	// renamed into place.
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("store identity file: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// AdoptStore records the store of cfg as the one this process serves from,
// after its fences were imported or rebuilt.
func AdoptStore(ctx context.Context, cfg *config.Config, store any) error {
	path := identityPath(cfg)
	st, ok := store.(identified)
	if path == "" || !ok {
		return nil
	}
	id, err := st.StoreID(ctx)
	if err != nil {
		return err
	}
	return WriteIdentityFile(path, cfg, id)
}
