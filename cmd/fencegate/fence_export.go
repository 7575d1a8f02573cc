package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/adapters/etcd"
	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/adapters/postgres"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/server"
	"github.com/spf13/cobra"
)

// fenceStore is what export, import and rebuild need of a store; bolt,
// postgres and etcd implement it.
type fenceStore interface {
	gateway.Store // LoadFence: the import's ceiling reads the fences
	ExportFences(ctx context.Context, fn func(fencegate.FenceRecord) error) error
	ImportFences(ctx context.Context, recs []fencegate.FenceRecord) (int, error)
	Close() error
}

// sequenceRaiser is the coordinator's token source on the same store.
type sequenceRaiser interface {
	RaiseSequence(ctx context.Context, token int64) error
}

// openFenceStore opens the store cfg names directly (not through a running
// gateway): the embedded file must not be open in a gateway.
func openFenceStore(ctx context.Context, cfg *config.Config) (fenceStore, sequenceRaiser, error) {
	switch {
	case cfg.Store.Embedded != nil:
		st, err := bolt.Open(cfg.Store.Embedded.Path, bolt.Options{})
		if errors.Is(err, bolt.ErrLocked) {
			return nil, nil, fmt.Errorf("%w; stop the gateway first (the embedded store is opened by one process at a time)", err)
		}
		if err != nil {
			return nil, nil, err
		}
		return st, bolt.NewLeases(st), nil
	case cfg.Store.Etcd != nil:
		// No lease records on etcd: no token sequence to raise.
		e := cfg.Store.Etcd
		st, err := etcd.OpenStore(server.EtcdStoreOptions(e))
		if err != nil {
			return nil, nil, err
		}
		return st, nil, nil
	default:
		p := cfg.Store.Postgres
		st, err := postgres.Open(ctx, p.URL, postgres.Options{MaxConns: 4, Timeout: p.Timeout})
		if err != nil {
			return nil, nil, err
		}
		return st, postgres.NewLeases(st), nil
	}
}

// fenceExportCmd writes every fence record as JSON lines.
type fenceExportCmd struct {
	printer
	config, out string
}

const fenceStoreHelp = `It opens the store the configuration names directly: on the embedded
store, stop the gateway first (the file is opened by one process at a
time). See docs/recovery.md.`

func newFenceExportCmd() *cobra.Command {
	c := &fenceExportCmd{}
	cmd := &cobra.Command{
		Use:   "export [-c FILE] [-o FILE]",
		Short: "write every fence record as JSON lines",
		Long: `Export writes every fence record of the store as JSON lines, for fence
import into another store. ` + fenceStoreHelp,
		Example: `  fencegate fence export -c fencegate.yaml -o fences.jsonl`,
		Args:    noArgs,
	}
	configFlag(cmd.Flags(), &c.config)
	cmd.Flags().StringVarP(&c.out, "output", "o", "-", "output `file` (- for stdout)")
	return wrap(cmd, c)
}

func (c *fenceExportCmd) Run(ctx context.Context, args []string) error {
	cfg, err := config.Load(c.config)
	if err != nil {
		return err
	}
	st, _, err := openFenceStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	w := c.stdout()
	var f *os.File
	if c.out != "-" {
		if f, err = os.OpenFile(c.out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600); err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	n := 0
	if err := st.ExportFences(ctx, func(r fencegate.FenceRecord) error {
		n++
		return enc.Encode(r)
	}); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if f != nil {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	fmt.Fprintf(c.stderr(), "exported %d fence(s)\n", n)
	return nil
}

// importBatch is how many records one import transaction merges.
const importBatch = 1000

// fenceImportCmd max-merges an export into the store.
type fenceImportCmd struct {
	printer
	config    string
	keepETags bool
	ceiling   ceilingFlag
}

func newFenceImportCmd() *cobra.Command {
	c := &fenceImportCmd{}
	cmd := &cobra.Command{
		Use:   "import [-c FILE] [--keep-etags] [--max-advance N] [FILE|-]",
		Short: "merge an export into the store (a fence is only ever raised)",
		Long: `Import merges the records of a fence export (FILE, or stdin) into the
store: each fence becomes the higher of its own and the exported highest,
and the coordinator's token sequence is raised above every imported token.
` + fenceStoreHelp,
		Example: `  fencegate fence import -c fencegate.yaml fences.jsonl
  ssh old-host fencegate fence export | fencegate fence import -
  fencegate fence import -c fencegate.yaml --max-advance -1 fences.jsonl   # a restore onto an empty store`,
		Args: maxArgs(1),
	}
	configFlag(cmd.Flags(), &c.config)
	cmd.Flags().BoolVar(&c.keepETags, "keep-etags", false, "keep the exported ETags (only if the upstream was not written since the export); "+
		"default: mark them unknown, so the next conditional write learns the current one")
	c.ceiling.flag(cmd, "record")
	return wrap(cmd, c)
}

// ceilingFlag is --max-advance of import and rebuild: that run's ceiling
// instead of fence.max_advance.
type ceilingFlag struct {
	maxAdvance int64
	set        bool
}

func (f *ceilingFlag) flag(cmd *cobra.Command, what string) {
	cmd.Flags().Int64Var(&f.maxAdvance, "max-advance", 0, "this run's ceiling instead of fence.max_advance: how far above what the store holds a "+what+" may raise a fence; "+
		"-1 for none (a restore onto an empty store, whose tokens are all far above 0)")
	cmd.PreRun = func(cmd *cobra.Command, _ []string) { f.set = cmd.Flags().Changed("max-advance") }
}

// apply puts the flag's ceiling, if given, into cfg.
func (f *ceilingFlag) apply(cfg *config.Config) error {
	if !f.set {
		return nil
	}
	if f.maxAdvance == 0 {
		return usagef("--max-advance 0 would refuse every record; give a positive ceiling or -1 for none")
	}
	cfg.Fence.MaxAdvance = f.maxAdvance
	return nil
}

func (c *fenceImportCmd) Run(ctx context.Context, args []string) error {
	cfg, err := config.Load(c.config)
	if err != nil {
		return err
	}
	if err := c.ceiling.apply(cfg); err != nil {
		return err
	}
	var in io.ReadSeeker
	if len(args) == 1 && args[0] != "-" {
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	} else {
		// The records are checked before any is written, so the input is
		// read twice: stdin is kept in a temporary file meanwhile.
		f, err := spool(os.Stdin)
		if err != nil {
			return err
		}
		defer func() { f.Close(); os.Remove(f.Name()) }()
		in = f
	}
	st, seq, err := openFenceStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	imp := &importer{st: st, seq: seq, keepETags: c.keepETags}
	if err := imp.check(ctx, in, server.ImportLimit(cfg, st), c.config); err != nil {
		return err
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := imp.run(ctx, in); err != nil {
		return err
	}
	if imp.read == 0 {
		return errNothingRestored("the input holds no fence record")
	}
	if err := server.AdoptStore(ctx, cfg, st); err != nil {
		return fmt.Errorf("imported, but the store identity file was not written: %w", err)
	}
	fmt.Fprintf(c.stderr(), "read %d record(s), raised or created %d fence(s); tokens issued from now on exceed %d\n", imp.read, imp.raised, imp.highest)
	return nil
}

// errNothingRestored is the answer of an import or rebuild that found no
// fence to restore: the store is not adopted (its marker is left as it
// was), since adopting a store after restoring nothing is
// --accept-empty-store that nobody asked for. An empty export piped from a
// failed ssh, a wrong file, bucket or prefix all end here.
func errNothingRestored(why string) error {
	return fmt.Errorf("%s: nothing was restored, and the store was not adopted as the one the gateway serves from "+
		"(if the fences really are lost, start with `fencegate serve --accept-empty-store`; docs/recovery.md)", why)
}

// spool copies r into a temporary file (mode 0600) and returns it, at its
// start.
func spool(r io.Reader) (*os.File, error) {
	f, err := os.CreateTemp("", "fencegate-import-*.jsonl")
	if err != nil {
		return nil, err
	}
	if _, err = io.Copy(f, r); err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}

// importer merges fence records batch by batch: memory is bounded by one
// batch, whatever the size of the export.
type importer struct {
	st        fenceStore
	seq       sequenceRaiser
	keepETags bool
	// limit, if set, refuses a record that raises its fence more than
	// fence.max_advance (server.ImportLimit), checked as records are added
	// (rebuild); import checks every record before it writes one.
	limit func(ctx context.Context, resource string, token int64) error

	batch   []fencegate.FenceRecord
	read    int
	raised  int
	highest int64
}

// records decodes the export in, calling fn with each valid record and
// its line number.
func records(in io.Reader, fn func(n int, r fencegate.FenceRecord) error) error {
	dec := json.NewDecoder(bufio.NewReaderSize(in, 64<<10))
	dec.DisallowUnknownFields()
	for n := 1; ; n++ {
		var r fencegate.FenceRecord
		err := dec.Decode(&r)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("record %d: %w", n, err)
		}
		if r.Resource == "" || r.Highest <= 0 {
			return fmt.Errorf("record %d: resource and a positive highest are required", n)
		}
		if err := fn(n, r); err != nil {
			return err
		}
	}
}

// check reads every record of in before anything is written: a malformed
// record, or one that raises its fence more than fence.max_advance above
// what the store holds (the ceiling of a hand advance, limit), refuses the
// whole import. A fence only rises, so what passes here still passes when
// the records are written.
func (imp *importer) check(ctx context.Context, in io.Reader, limit func(context.Context, string, int64) error, cfgFile string) error {
	err := records(in, func(n int, r fencegate.FenceRecord) error {
		if limit == nil {
			return nil
		}
		if err := limit(ctx, r.Resource, r.Highest); err != nil {
			return fmt.Errorf("record %d: %w", n, err)
		}
		return nil
	})
	if err == nil {
		return nil
	}
	msg := fmt.Sprintf("%v; nothing was imported", err)
	var fe *fencegate.Error
	if errors.As(err, &fe) && fe.Code == fencegate.CodeTokenOutOfRange {
		msg += fmt.Sprintf(" (an import is bounded like a hand advance: if the token is real, pass --max-advance -1 (no ceiling) or a larger one, or raise fence.max_advance in the configuration of this import, %s)", cfgFile)
	}
	return errors.New(msg)
}

func (imp *importer) run(ctx context.Context, in io.Reader) error {
	err := records(in, func(n int, r fencegate.FenceRecord) error {
		imp.read++
		if !imp.keepETags {
			r.ETag = fencegate.ETagUnknown
		}
		return imp.add(ctx, r)
	})
	if err != nil {
		return err
	}
	return imp.flush(ctx)
}

func (imp *importer) add(ctx context.Context, r fencegate.FenceRecord) error {
	if imp.limit != nil {
		if err := imp.limit(ctx, r.Resource, r.Highest); err != nil {
			return err
		}
	}
	imp.batch = append(imp.batch, r)
	if len(imp.batch) >= importBatch {
		return imp.flush(ctx)
	}
	return nil
}

// flush raises the coordinator's sequence above the batch, then merges the
// batch. In this order an interrupted import leaves at worst a gap in the
// tokens, never a fence above the next token issued.
func (imp *importer) flush(ctx context.Context) error {
	if len(imp.batch) == 0 {
		return nil
	}
	var top int64
	for _, r := range imp.batch {
		top = max(top, r.Highest)
	}
	if imp.seq != nil {
		if err := imp.seq.RaiseSequence(ctx, top); err != nil {
			return err
		}
	}
	n, err := imp.st.ImportFences(ctx, imp.batch)
	if err != nil {
		return err
	}
	imp.raised += n
	imp.highest = max(imp.highest, top)
	imp.batch = imp.batch[:0]
	return nil
}

// fenceRebuildCmd raises fences from the stamps `stamp: true` left on S3,
// GCS and Azure objects: each object's fence becomes at least its stamped
// token.
type fenceRebuildCmd struct {
	printer
	config, route, bucket, prefix string
	ceiling                       ceilingFlag
}

func newFenceRebuildCmd() *cobra.Command {
	c := &fenceRebuildCmd{}
	cmd := &cobra.Command{
		Use:   "rebuild [-c FILE] --bucket NAME [--route NAME] [--prefix P] [--max-advance N]",
		Short: "raise fences from the token stamps on " + server.ObjectStoreNames("or", "") + " objects",
		Long: `Rebuild scans the objects of an ` + server.ObjectStoreNames("or", "--bucket") + ` route's bucket (an Azure
route's container, --container) for the token stamps that ` + stampKeys() + ` leaves on them, and raises
each object's fence to at least its stamped token. A stamp more than
fence.max_advance above what the store holds stops the rebuild (an object
written around the gateway can carry any stamp); the fences raised before
it stay raised, and a rebuild can be run again.
` + fenceStoreHelp,
		Example: `  fencegate fence rebuild -c fencegate.yaml --bucket orders --prefix 2024/
  fencegate fence rebuild -c fencegate.yaml --bucket orders --max-advance -1   # onto an empty store
  fencegate fence rebuild -c fencegate.yaml --route blobs --container orders   # Azure`,
		Args: noArgs,
	}
	configFlag(cmd.Flags(), &c.config)
	cmd.Flags().StringVar(&c.route, "route", "", server.ObjectStoreNames("or", "")+" route whose objects are scanned (default: the only one)")
	cmd.Flags().StringVar(&c.bucket, "bucket", "", "bucket to scan (required)")
	cmd.Flags().StringVar(&c.bucket, "container", "", "Azure container to scan (the same as --bucket)")
	cmd.Flags().StringVar(&c.prefix, "prefix", "", "scan only keys starting with this prefix")
	c.ceiling.flag(cmd, "stamp")
	return wrap(cmd, c)
}

// stampKeys names the object-store sections' stamp settings, from the
// registry: "s3.stamp: true\n(gcs.stamp, azure.stamp)".
func stampKeys() string {
	kinds := config.ObjectStoreKinds()
	if len(kinds) == 0 {
		return "stamp: true"
	}
	k := kinds[0] + ".stamp: true"
	if len(kinds) > 1 {
		k += "\n(" + strings.Join(kinds[1:], ".stamp, ") + ".stamp)"
	}
	return k
}

func (c *fenceRebuildCmd) Run(ctx context.Context, args []string) error {
	path, routeName, bucket, prefix := c.config, c.route, c.bucket, c.prefix
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	if bucket == "" {
		return usagef("--bucket (--container) is required")
	}
	if err := c.ceiling.apply(cfg); err != nil {
		return err
	}
	var rc *config.Route
	if cfg.Gateway != nil {
		for i := range cfg.Gateway.Routes {
			r := &cfg.Gateway.Routes[i]
			if r.ObjectStore() == nil || (routeName != "" && r.Name != routeName) {
				continue
			}
			if rc != nil {
				return usagef("several %s routes: choose one with --route", server.ObjectStoreNames("or", ""))
			}
			rc = r
		}
	}
	if rc == nil {
		return usagef("no %s route %q in %s", server.ObjectStoreNames("or", ""), routeName, path)
	}
	dia, ok := server.ObjectStoreOf(*rc)
	if !ok {
		return fmt.Errorf("route %s: no object-store dialect for %s", rc.Name, rc.ObjectStore().Kind())
	}
	sc, err := dia.Scanner(ctx, *rc)
	if err != nil {
		return fmt.Errorf("route %s: %w", rc.Name, err)
	}
	if !sc.Stamps {
		kind := rc.ObjectStore().Kind()
		fmt.Fprintf(c.stderr(), "warning: route %s has no %s.stamp: true; objects it wrote carry no stamp\n", rc.Name, kind)
	}
	up, vars := sc.Upstream, sc.Vars
	rt, err := gateway.NewRoute(server.RouteOptions(*rc), up)
	if err != nil {
		return fmt.Errorf("route %s: %w", rc.Name, err)
	}
	st, seq, err := openFenceStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	// A rebuilt fence's ETag is unknown: the next conditional write learns
	// it with a HEAD (on GCS, a generation with a GET).
	imp := &importer{st: st, seq: seq, limit: server.ImportLimit(cfg, st)}
	unstamped, err := sc.Scan(ctx, bucket, prefix, func(stamp objectstore.Stamp) error {
		b, key, token := stamp.Collection, stamp.Object, stamp.Token
		res, err := rt.ResourceOf(vars(b, key))
		if err != nil {
			return fmt.Errorf("object %s/%s: resource template %q: %w", b, key, rc.Resource, err)
		}
		imp.read++
		err = imp.add(ctx, fencegate.FenceRecord{Resource: res, Highest: token, Owner: "rebuild", ETag: fencegate.ETagUnknown})
		var fe *fencegate.Error
		if errors.As(err, &fe) && fe.Code == fencegate.CodeTokenOutOfRange {
			return fmt.Errorf("object %s/%s: %w", b, key, err)
		}
		return err
	})
	if err == nil {
		err = imp.flush(ctx)
	}
	if err != nil {
		var fe *fencegate.Error
		if errors.As(err, &fe) && fe.Code == fencegate.CodeTokenOutOfRange {
			return fmt.Errorf("%w; %d fence(s) raised before it stay raised, and the store is not yet adopted "+
				"(a stamp written around the gateway can be anything: if this one is real, run the rebuild again with "+
				"--max-advance -1 (no ceiling) or a larger one; if not, remove or rewrite the object first, or skip it with --prefix)",
				err, imp.raised)
		}
		return err
	}
	if imp.read == 0 {
		return errNothingRestored(fmt.Sprintf("no object of bucket %s under prefix %q carries a stamp (%d without one)", bucket, prefix, unstamped))
	}
	if err := server.AdoptStore(ctx, cfg, st); err != nil {
		return fmt.Errorf("rebuilt, but the store identity file was not written: %w", err)
	}
	fmt.Fprintf(c.stderr(), "scanned %d stamped object(s) (%d without a stamp), raised or created %d fence(s); tokens issued from now on exceed %d\n",
		imp.read, unstamped, imp.raised, imp.highest)
	return nil
}
