package main

// The command tree. github.com/spf13/cobra gives what people expect of a
// CLI in the Go ecosystem (kubectl, gh, hugo): flags before or after
// positional arguments, `help CMD` and `CMD -h` everywhere, shell completion
// and "did you mean" for mistyped commands. Each subcommand stays a small
// struct with Run(ctx, args) (STYLE.md rule 6); its constructor binds the
// flags to the struct's fields and wrap hands it the positional arguments.
//
// Single-dash long flags (`-owner w1`, `-c FILE`) are the spelling of the
// Go flag package this CLI started on, used by scripts and docs;
// normalizeArgs turns them into pflag's `--owner` before cobra parses.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit statuses every command shares; lease adds its own (lease.go).
const (
	exitOK     = 0 // done; a check passed
	exitFailed = 1 // a check failed, or the work could not be done
	exitUsage  = 2 // the command line is wrong: nothing was done
)

// command is one subcommand. args are the positional arguments; flags are
// already in the struct's fields.
type command interface {
	Run(ctx context.Context, args []string) error
}

// usageError is a mistake in the command line; run prints it with a hint
// and exits 2. With usage set, the command's usage is printed after it.
type usageError struct {
	msg   string
	usage bool
}

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// exitCoder lets a subcommand choose its exit status (scripts test them).
type exitCoder interface{ ExitCode() int }

// printer is embedded by the commands that print, so that tests can
// capture what they print; wrap sets it to cobra's writers.
type printer struct{ out, errOut io.Writer }

func (p *printer) setOutput(out, errOut io.Writer) { p.out, p.errOut = out, errOut }

func (p *printer) stdout() io.Writer {
	if p.out == nil {
		return os.Stdout
	}
	return p.out
}

func (p *printer) stderr() io.Writer {
	if p.errOut == nil {
		return os.Stderr
	}
	return p.errOut
}

// wrap makes cc run c with the positional arguments.
func wrap(cc *cobra.Command, c command) *cobra.Command {
	cc.RunE = func(cmd *cobra.Command, args []string) error {
		if p, ok := c.(interface{ setOutput(io.Writer, io.Writer) }); ok {
			p.setOutput(cmd.OutOrStdout(), cmd.ErrOrStderr())
		}
		return c.Run(cmd.Context(), args)
	}
	return cc
}

// group makes cc a command whose words are its subcommands: it runs only
// to say that the subcommand is missing or unknown (cobra would print the
// help and exit 0 for `fencegate lease frobnicate`).
func group(cc *cobra.Command, subs ...*cobra.Command) *cobra.Command {
	cc.Args = cobra.ArbitraryArgs
	cc.SuggestionsMinimumDistance = 2
	cc.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return &usageError{msg: "missing command: want " + subNames(cmd), usage: true}
		}
		return unknownCommand(cmd, args[0])
	}
	cc.AddCommand(subs...)
	return cc
}

func subNames(cmd *cobra.Command) string {
	var names []string
	for _, s := range cmd.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	if len(names) > 1 {
		return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	}
	return strings.Join(names, "")
}

func unknownCommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	} else {
		msg += ": want " + subNames(cmd)
	}
	return &usageError{msg: msg}
}

// Positional-argument checks that return usage errors (cobra's own return
// plain errors, which would exit 1).

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) != 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}

// exactArgs wants the arguments names (RESOURCE, TOKEN) in this order.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usagef("%s takes %s, got %d argument(s)", cmd.Name(), strings.Join(names, " "), len(args))
		}
		return nil
	}
}

func maxArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > n {
			return usagef("%s takes at most %d argument(s), got %d", cmd.Name(), n, len(args))
		}
		return nil
	}
}

// configFlag adds -c (--config), the configuration file of the commands
// that read it.
func configFlag(fs *pflag.FlagSet, p *string) {
	fs.StringVarP(p, "config", "c", "fencegate.yaml", "configuration `file`")
	cobra.MarkFlagFilename(fs, "config", "yaml", "yml")
}

// subcommand is one row of a command group's table of subcommands: its
// usage line and help.
type subcommand struct{ use, short, long, example string }

// command is the cobra command of s; note ends its long help, args are
// its positional arguments.
func (s subcommand) command(note string, args ...string) *cobra.Command {
	return &cobra.Command{
		Use:     s.use,
		Short:   s.short,
		Long:    s.long + "\n\n" + note,
		Example: s.example,
		Args:    exactArgs(args...),
	}
}

// adminFlags adds --admin (env FENCEGATE_ADMIN) and --api-key, the admin
// listener of the commands that talk to a running gateway.
func adminFlags(fs *pflag.FlagSet, admin, key *string) {
	fs.StringVar(admin, "admin", envOr("FENCEGATE_ADMIN", "http://127.0.0.1:9090"), "admin listener `URL` (env FENCEGATE_ADMIN)")
	apiKeyFlag(fs, key, "admin")
}

// apiKeyFlag adds --api-key, the key of the admin or coordinator API.
func apiKeyFlag(fs *pflag.FlagSet, key *string, api string) {
	fs.StringVar(key, "api-key", "", api+" API `key` (default env FENCEGATE_API_KEY; prefer the environment: flags show in ps)")
}

// choice checks a flag whose value is one of a few words and completes it.
func choice(cmd *cobra.Command, name string, words ...string) {
	cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(words, cobra.ShellCompDirectiveNoFileComp))
}

func checkChoice(flag, got string, words ...string) error {
	for _, w := range words {
		if got == w {
			return nil
		}
	}
	return usagef("-%s must be %s, got %q", flag, strings.Join(words, " or "), got)
}

const usageTemplate = `Usage:{{if .HasAvailableSubCommands}}
  {{.CommandPath}} COMMAND [flags]{{else}}
  {{.UseLine}}{{end}}{{if gt (len .Aliases) 0}}

Aliases:
  {{.NameAndAliases}}{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableSubCommands}}

Run '{{.CommandPath}} help COMMAND' (or '{{.CommandPath}} COMMAND -h') for a command's flags and examples.{{end}}
`

// newRoot builds the whole command tree, printing to stdout and stderr.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "fencegate",
		Short: "the fencing write-gateway and lease coordinator",
		Long: `fencegate is a fencing write-gateway: a reverse proxy that refuses writes whose
Fencing-Token is older than the highest accepted for their resource, and a
lease coordinator that issues the tokens. One binary runs them and their
operator tools.

Flags may come before or after arguments, with one dash or two (-c FILE,
--owner w1). Exit status: 0 ok, 1 a check failed or the work could not be
done, 2 usage (nothing was done); 'fencegate lease -h' lists lease's own.`,
		Example: `  fencegate validate -c configs/quickstart.yaml
  fencegate serve -c configs/quickstart.yaml
  fencegate lease run /orders/7 --ttl 30s -- ./ship-order 7
  source <(fencegate completion bash)`,
		Version:       currentVersion().String(),
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	// Before the completion command, which keeps the writer it is given.
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.Flags().Bool("version", false, "print the version and exit (as 'fencegate version')")
	root.SetUsageTemplate(usageTemplate)
	root.SetFlagErrorFunc(flagError)
	group(root,
		newServeCmd(),
		newValidateCmd(),
		newConfigCmd(),
		newLeaseCmd(),
		newFenceCmd(),
		newListCmd("refusals"),
		newMigrateCmd(),
		newDoctorCmd(),
		newDemoCmd(),
		newUpstreamCmd(),
		newVersionCmd(),
	)
	root.SetHelpCommand(newHelpCmd())
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		group(c)
		c.Short = "print a shell completion script (bash, zsh, fish, powershell)"
		c.Example = "  source <(fencegate completion bash)\n  fencegate completion zsh > \"${fpath[1]}/_fencegate\"\n  fencegate completion fish > ~/.config/fish/completions/fencegate.fish"
		for _, s := range c.Commands() {
			s.Example = "  fencegate completion " + s.Name() + " > fencegate." + s.Name()
			s.Args = noArgs
		}
	}
	// A usage line that spells out its flags needs no "[flags]" after it.
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if strings.Contains(c.Use, " -") {
			c.DisableFlagsInUseLine = true
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return root
}

// newHelpCmd replaces cobra's help command, which prints the top-level
// help and exits 0 for a topic that does not exist.
func newHelpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "help [COMMAND...]",
		Short: "print a command's help",
		Long:  "Help prints the help of any command, with its flags and an example.",
		Example: `  fencegate help lease run
  fencegate lease run -h          # the same`,
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			target, _, err := cmd.Root().Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var out []cobra.Completion
			for _, s := range target.Commands() {
				if s.IsAvailableCommand() && strings.HasPrefix(s.Name(), toComplete) {
					out = append(out, cobra.CompletionWithDesc(s.Name(), s.Short))
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			target, rest, err := cmd.Root().Find(args)
			if err != nil {
				return &usageError{msg: err.Error()}
			}
			if len(rest) > 0 && target.HasAvailableSubCommands() {
				return unknownCommand(target, rest[0])
			}
			target.InitDefaultHelpFlag()
			return target.Help()
		},
	}
}

// flagError turns pflag's errors into usage errors that say what would be
// valid: the flag a typo meant, the form of a duration.
func flagError(cmd *cobra.Command, err error) error {
	// `fencegate serv -c x`: cobra found no command "serv", so the root
	// parsed the flags meant for it and failed on -c. The misspelt command
	// is what to report.
	if cmd.HasSubCommands() {
		if args := cmd.Flags().Args(); len(args) > 0 {
			if c, _, ferr := cmd.Find(args[:1]); ferr != nil || c == cmd {
				return unknownCommand(cmd, args[0])
			}
		}
	}
	msg := err.Error()
	var ne *pflag.NotExistError
	var ie *pflag.InvalidValueError
	var ve *pflag.ValueRequiredError
	switch {
	case errors.As(err, &ve):
		f := ve.GetFlag()
		name, _ := pflag.UnquoteUsage(f)
		if name == "" {
			name = "value"
		}
		msg = fmt.Sprintf("flag --%s needs a %s", f.Name, name)
		if f.Shorthand != "" {
			msg = fmt.Sprintf("flag -%s (--%s) needs a %s", f.Shorthand, f.Name, name)
		}
	case errors.As(err, &ne) && len(ne.GetSpecifiedName()) > 1:
		if s := suggestFlag(cmd, ne.GetSpecifiedName()); s != "" {
			msg += "; did you mean --" + s + "?"
		}
	case errors.As(err, &ie) && ie.GetFlag().Value.Type() == "duration":
		msg = fmt.Sprintf("invalid duration %q for -%s: want a number and a unit, like 30s, 1m or 250ms", ie.GetValue(), ie.GetFlag().Name)
	case errors.As(err, &ie):
		var ne *strconv.NumError
		if errors.As(err, &ne) {
			msg = fmt.Sprintf("invalid value %q for -%s: want a whole number", ie.GetValue(), ie.GetFlag().Name)
		}
	}
	return &usageError{msg: msg}
}

// suggestFlag is the flag of cmd closest to name, if close enough.
func suggestFlag(cmd *cobra.Command, name string) string {
	best, bestD := "", 3
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		if d := levenshtein(name, f.Name); d < bestD || (d == bestD && strings.HasPrefix(f.Name, name)) {
			best, bestD = f.Name, d
		}
		if strings.HasPrefix(f.Name, name) && best == "" {
			best = f.Name
		}
	})
	return best
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// normalizeArgs rewrites the Go flag package's single-dash long flags
// (-owner w1, -ttl=2s, -help, -version) into pflag's --owner, so that the
// spellings of scripts written for the first CLI keep working. Single
// letters stay shorthands (-c FILE, -o json, -h); --c becomes -c. It walks
// the arguments as cobra will, descending into subcommands, so that a
// flag's value (-owner -odd-name) is left alone; everything after "--"
// (lease run's command) is passed on untouched.
func normalizeArgs(root *cobra.Command, args []string) []string {
	out := make([]string, 0, len(args))
	cmd := root
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		switch {
		case len(a) > 2 && a[0] == '-' && a[1] != '-' && isLetter(a[1]) && a[2] != '=':
			a = "-" + a
		case len(a) >= 3 && strings.HasPrefix(a, "--") && (len(a) == 3 || a[3] == '=') && isLetter(a[2]):
			a = a[1:]
		}
		out = append(out, a)
		if !strings.HasPrefix(a, "-") || a == "-" {
			if sub := findSub(cmd, a); sub != nil {
				cmd = sub
			}
			continue
		}
		var f *pflag.Flag
		if strings.HasPrefix(a, "--") {
			name, _, hasValue := strings.Cut(a[2:], "=")
			if hasValue {
				continue
			}
			f = cmd.Flags().Lookup(name)
		} else if len(a) == 2 {
			f = cmd.Flags().ShorthandLookup(a[1:])
		}
		if f != nil && f.NoOptDefVal == "" && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

func isLetter(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }

func findSub(cmd *cobra.Command, name string) *cobra.Command {
	for _, s := range cmd.Commands() {
		if s.Name() == name || s.HasAlias(name) {
			return s
		}
	}
	return nil
}

// run executes the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	if len(args) > 0 && strings.HasPrefix(args[0], "__complete") {
		// Shell completion: the last word is what the user is typing,
		// which the shell matches the candidates against as typed.
		last := len(args) - 1
		args = append(normalizeArgs(root, args[:last]), args[last:]...)
	} else {
		args = normalizeArgs(root, args)
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	return exitStatus(cmd, err, stderr)
}

// exitStatus prints err for the user and maps it to the exit status.
func exitStatus(cmd *cobra.Command, err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	name := "fencegate"
	if cmd != nil {
		name = cmd.CommandPath()
	}
	var ue *usageError
	var ec exitCoder
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		if ue.usage && cmd != nil {
			fmt.Fprintf(stderr, "\n%s", cmd.UsageString())
		} else {
			fmt.Fprintf(stderr, "Run '%s -h' for usage.\n", name)
		}
		return exitUsage
	case errors.As(err, &ec):
		if msg := err.Error(); msg != "" {
			fmt.Fprintf(stderr, "%s: %s\n", name, msg)
		}
		return ec.ExitCode()
	case strings.HasPrefix(err.Error(), "unknown command ") || strings.HasPrefix(err.Error(), "invalid argument "):
		// cobra's own usage errors (Find, ValidArgs).
		fmt.Fprintf(stderr, "%s: %v\nRun '%s -h' for usage.\n", name, err, name)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitFailed
	}
}

// envOr is the environment variable k, else def.
func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// apiKey is the -api-key flag, else FENCEGATE_API_KEY.
func apiKey(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv("FENCEGATE_API_KEY")
}

// unreachable says which flag names the address a request could not
// reach; other errors pass unchanged.
func unreachable(err error, flag, env, addr string) error {
	var ue *url.Error
	if errors.As(err, &ue) && !ue.Timeout() {
		return fmt.Errorf("%w (is %s right? set it with --%s or %s)", err, addr, flag, env)
	}
	return err
}
