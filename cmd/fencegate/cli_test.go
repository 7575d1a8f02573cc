package main

// CLI golden tests: the help of every command and the main usage errors
// are kept in testdata/*.golden. After a deliberate change, regenerate them
// with
//
//	go test ./cmd/fencegate/ -run 'TestHelpGolden|TestUsageErrorsGolden' -update
//
// and review the diff like any other.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// runCLI runs the command line in this process, as main does.
func runCLI(args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// stableEnv clears the variables that flag defaults are read from, so
// that the help does not depend on the machine.
func stableEnv(t *testing.T) {
	for _, k := range []string{"FENCEGATE_COORDINATOR", "FENCEGATE_ADMIN", "FENCEGATE_URL", "FENCEGATE_OWNER", "FENCEGATE_API_KEY", "DATABASE_URL"} {
		t.Setenv(k, "")
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the output (run with -update after a deliberate change)\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// commandPaths is every command a user can type, as words after
// "fencegate" (the root is the empty path).
func commandPaths(t *testing.T) [][]string {
	t.Helper()
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() || s.Name() == "help" {
				walk(s, append(append([]string(nil), path...), s.Name()))
			}
		}
	}
	walk(newRoot(io.Discard, io.Discard), nil)
	return paths
}

// TestHelpGolden: `fencegate help CMD...` and `fencegate CMD... -h` print
// the same help, on stdout, exit 0, and it is the golden one.
func TestHelpGolden(t *testing.T) {
	stableEnv(t)
	paths := commandPaths(t)
	if len(paths) < 30 {
		t.Fatalf("only %d commands found: %q", len(paths), paths)
	}
	seen := map[string]bool{}
	for _, path := range paths {
		name := "help"
		if len(path) > 0 {
			name = "help-" + strings.Join(path, "-")
		}
		t.Run(name, func(t *testing.T) {
			help, errOut, code := runCLI(append([]string{"help"}, path...)...)
			if code != 0 || errOut != "" {
				t.Fatalf("help %q: exit %d, stderr %q", path, code, errOut)
			}
			for _, flag := range []string{"-h", "--help", "-help"} {
				out, errOut, code := runCLI(append(append([]string(nil), path...), flag)...)
				if code != 0 || errOut != "" || out != help {
					t.Errorf("%q %s: exit %d, stderr %q; want the output of help %q", path, flag, code, errOut, path)
				}
			}
			golden(t, name, help)
		})
		seen[name] = true
	}
	// A golden file of a command that no longer exists is stale.
	files, _ := filepath.Glob("testdata/help*.golden")
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".golden"); !seen[name] && !*update {
			t.Errorf("%s: no such command any more (delete the file)", f)
		}
	}
}

// TestEveryCommandHasExample: the bar is an example in every
// command's help, and one that names the command.
func TestEveryCommandHasExample(t *testing.T) {
	for _, path := range commandPaths(t) {
		c, _, err := newRoot(io.Discard, io.Discard).Find(path)
		if err != nil {
			t.Fatal(err)
		}
		if c.Example == "" {
			t.Errorf("fencegate %s has no Example", strings.Join(path, " "))
			continue
		}
		if want := strings.Join(append([]string{"fencegate"}, path...), " "); !strings.Contains(c.Example, want) &&
			(len(path) < 2 || !strings.Contains(c.Example, path[len(path)-1])) {
			t.Errorf("%s: the example %q does not show the command", want, c.Example)
		}
		if c.Short == "" {
			t.Errorf("fencegate %s has no Short description", strings.Join(path, " "))
		}
	}
}

// TestUsageErrorsGolden: what a user sees after a mistake, and exit 2.
func TestUsageErrorsGolden(t *testing.T) {
	stableEnv(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"no-command", nil, exitUsage},
		{"typo-command", []string{"leese"}, exitUsage},
		{"typo-command-with-flag", []string{"serv", "-c", "x.yaml"}, exitUsage},
		{"serve-no-config", []string{"serve"}, exitUsage},
		{"typo-subcommand", []string{"lease", "aquire", "/orders/7"}, exitUsage},
		{"unknown-subcommand", []string{"fence", "frobnicate"}, exitUsage},
		{"missing-subcommand", []string{"lease"}, exitUsage},
		{"typo-flag", []string{"lease", "acquire", "/orders/7", "-ownr", "w1"}, exitUsage},
		{"typo-flag-double-dash", []string{"lease", "acquire", "--tll", "2s", "/orders/7"}, exitUsage},
		{"bad-duration", []string{"lease", "acquire", "/orders/7", "--ttl", "30"}, exitUsage},
		{"bad-integer", []string{"fence", "reset", "/orders/7", "--to", "ten", "--confirm"}, exitUsage},
		{"missing-argument", []string{"lease", "renew", "/orders/7"}, exitUsage},
		{"bad-token", []string{"lease", "renew", "/orders/7", "seven"}, exitUsage},
		{"bad-output", []string{"lease", "show", "/orders/7", "-o", "yaml"}, exitUsage},
		{"lease-run-no-dash", []string{"lease", "run", "/orders/7"}, exitUsage},
		{"lease-run-no-command", []string{"lease", "run", "/orders/7", "--"}, exitUsage},
		{"lease-run-two-resources", []string{"lease", "run", "/a", "/b", "--", "true"}, exitUsage},
		{"fence-reset-no-confirm", []string{"fence", "reset", "/orders/7", "-to", "3"}, exitUsage},
		{"stray-argument", []string{"validate", "-c", "x.yaml", "extra"}, exitUsage},
		{"flag-needs-value", []string{"validate", "-c"}, exitUsage},
		{"help-unknown-topic", []string{"help", "leese"}, exitUsage},
		{"config-unknown", []string{"config", "scheme"}, exitUsage},
		{"completion-unknown-shell", []string{"completion", "tcsh"}, exitUsage},
		{"validate-missing-file", []string{"validate", "-c", "testdata/no-such.yaml"}, exitFailed},
		{"coordinator-unreachable", []string{"lease", "acquire", "/orders/7", "--coordinator", "http://127.0.0.1:1"}, exitFailed},
		{"admin-unreachable", []string{"fence", "show", "/orders/7", "-admin", "http://127.0.0.1:1"}, exitFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runCLI(tc.args...)
			if code != tc.code {
				t.Errorf("%q: exit %d; want %d\n%s", tc.args, code, tc.code, errOut)
			}
			if out != "" {
				t.Errorf("%q: stdout %q; want nothing (errors go to stderr)", tc.args, out)
			}
			golden(t, "error-"+tc.name, "$ fencegate "+strings.Join(tc.args, " ")+"\n"+errOut+"exit status "+strconv.Itoa(code)+"\n")
		})
	}
}

// TestFlagSpellings: the Go flag package's single-dash long flags, pflag's
// double-dash ones, = or a separate value, before or after the positional
// arguments: all parse the same. Everything after -- is left alone.
func TestFlagSpellings(t *testing.T) {
	type want struct {
		owner, ttl string
		args       []string
	}
	base := want{"w1", "2s", []string{"/orders/7"}}
	for _, args := range [][]string{
		{"lease", "acquire", "-owner", "w1", "-ttl", "2s", "/orders/7"},
		{"lease", "acquire", "--owner", "w1", "--ttl", "2s", "/orders/7"},
		{"lease", "acquire", "-owner=w1", "--ttl=2s", "/orders/7"},
		{"lease", "acquire", "/orders/7", "-owner", "w1", "-ttl", "2s"},
		{"lease", "acquire", "/orders/7", "--owner=w1", "-ttl=2s"},
		{"lease", "acquire", "-ttl", "2s", "/orders/7", "--owner", "w1"},
	} {
		got := parse(t, args)
		if got.owner != base.owner || got.ttl != base.ttl || strings.Join(got.args, " ") != strings.Join(base.args, " ") {
			t.Errorf("%q: owner %q ttl %q args %q; want %+v", args, got.owner, got.ttl, got.args, base)
		}
	}
	// A value that looks like a flag stays a value.
	if got := parse(t, []string{"lease", "acquire", "-owner", "-odd-name", "/r"}); got.owner != "-odd-name" || len(got.args) != 1 {
		t.Errorf("owner %q args %q; want -odd-name and /r", got.owner, got.args)
	}
	// Single letters are shorthands, whatever the dashes.
	for _, args := range [][]string{{"validate", "-c", "f.yaml"}, {"validate", "--c", "f.yaml"}, {"validate", "-c=f.yaml"}, {"validate", "--config", "f.yaml"}, {"validate", "-config", "f.yaml"}} {
		root := newRoot(io.Discard, io.Discard)
		c, rest, err := root.Find(normalizeArgs(root, args))
		if err == nil {
			err = c.ParseFlags(rest)
		}
		if v, _ := c.Flags().GetString("config"); err != nil || v != "f.yaml" {
			t.Errorf("%q: config %q, %v; want f.yaml", args, v, err)
		}
	}
	// lease run: CMD's own flags, and a second --, reach CMD untouched.
	root := newRoot(io.Discard, io.Discard)
	args := []string{"lease", "run", "-ttl", "1s", "/orders/7", "-owner", "job", "--", "sh", "-c", "echo -owner $1", "--", "-ttl"}
	c, rest, err := root.Find(normalizeArgs(root, args))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ParseFlags(rest); err != nil {
		t.Fatal(err)
	}
	pos := c.Flags().Args()
	n := c.ArgsLenAtDash()
	if owner, _ := c.Flags().GetString("owner"); owner != "job" || n != 1 || strings.Join(pos[n:], "|") != "sh|-c|echo -owner $1|--|-ttl" {
		t.Errorf("lease run: owner %q, args %q (dash at %d); want CMD sh -c 'echo -owner $1' -- -ttl", owner, pos, n)
	}
}

func parse(t *testing.T, args []string) (w struct {
	owner, ttl string
	args       []string
}) {
	t.Helper()
	root := newRoot(io.Discard, io.Discard)
	c, rest, err := root.Find(normalizeArgs(root, args))
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	if err := c.ParseFlags(rest); err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	w.owner, _ = c.Flags().GetString("owner")
	w.ttl = c.Flags().Lookup("ttl").Value.String()
	w.args = c.Flags().Args()
	return w
}

// TestCompletion: the scripts are generated for bash, zsh and fish (bash
// checks its syntax), and the completion protocol they call completes
// commands, subcommands and flag values.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out, errOut, code := runCLI("completion", shell)
		if code != 0 || !strings.Contains(out, "fencegate") || errOut != "" {
			t.Fatalf("completion %s: exit %d, %d bytes, stderr %q", shell, code, len(out), errOut)
		}
		if shell == "bash" {
			cmd := exec.Command("bash", "-n")
			cmd.Stdin = strings.NewReader(out)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("bash -n on the bash completion: %v\n%s", err, b)
			}
		}
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", "le"}, []string{"lease"}},
		{[]string{"__complete", "lease", ""}, []string{"acquire", "renew", "release", "show", "run", "list"}},
		{[]string{"__complete", "lease", "acquire", "/r", "-o", ""}, []string{"token", "json"}},
		{[]string{"__complete", "fence", "list", "--output", ""}, []string{"table", "json"}},
		{[]string{"__complete", "lease", "acquire", "-owner", "w1", "--tt"}, []string{"--ttl"}},
		{[]string{"__complete", "help", "fe"}, []string{"fence"}},
	} {
		out, _, code := runCLI(tc.args...)
		if code != 0 {
			t.Errorf("%q: exit %d", tc.args, code)
		}
		for _, w := range tc.want {
			if !strings.Contains("\n"+out, "\n"+w) {
				t.Errorf("%q: %q lacks %q", tc.args, out, w)
			}
		}
	}
}

// fencegateLine finds the command lines in code: `fencegate ...` in
// backticks, or a code block's line, up to what ends a shell command.
var fencegateLine = regexp.MustCompile("(?:^|[\\s(`])(?:\\./)?fencegate((?: +[^|&;)#<>`\\n]*)?)")

// TestDocsCommandLines: every fencegate command line in README.md and
// docs/*.md names a real command and real flags, and has arguments a
// command accepts (the docs and the golden help cannot drift apart).
func TestDocsCommandLines(t *testing.T) {
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md")
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inBlock := false
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "```") {
				inBlock = !inBlock
				continue
			}
			for _, m := range fencegateLine.FindAllStringSubmatch(line, -1) {
				if !inBlock && !strings.Contains(line, "`fencegate"+m[1]) && !strings.Contains(line, "`./fencegate"+m[1]) {
					continue // prose: "fencegate serves ..."
				}
				text := regexp.MustCompile(`\s+\d$`).ReplaceAllString(m[1], "") // 2>log
				args := strings.Fields(strings.NewReplacer(`"`, "", "'", "").Replace(text))
				if len(args) == 0 || strings.ContainsAny(args[0], "[|.:,\\") || args[0] == "is" || strings.Contains(text, ": ") {
					// Not a command line: "fencegate lease run: lease ... lost" quotes a message.
					continue
				}
				// A synopsis (lease acquire [-ttl 30s] RESOURCE, reset R -to T)
				// or prose: the command words and flag names only.
				synopsis := !inBlock || strings.ContainsAny(text, "[|") || strings.Contains(text, "...") || slices.ContainsFunc(args, isPlaceholder)
				if synopsis {
					args = commandWords(args)
				}
				n++
				root := newRoot(io.Discard, io.Discard)
				c, rest, err := root.Find(normalizeArgs(root, args))
				if err == nil {
					err = c.ParseFlags(rest)
				}
				if errors.Is(err, pflag.ErrHelp) {
					err = nil
				}
				if err == nil && c.HasAvailableSubCommands() && len(c.Flags().Args()) > 0 {
					err = unknownCommand(c, c.Flags().Args()[0])
				}
				if err == nil && !synopsis && c.Args != nil {
					err = c.Args(c, c.Flags().Args())
				}
				if err != nil {
					t.Errorf("%s:%d: fencegate%s: %v", f, i+1, m[1], err)
				}
			}
		}
	}
	if n < 40 {
		t.Fatalf("found only %d command lines in the docs", n)
	}
}

// commandWords is the leading words of args that are not flags.
func commandWords(args []string) []string {
	for i, a := range args {
		if strings.HasPrefix(a, "-") || strings.HasPrefix(a, "[") || strings.HasPrefix(a, "/") || isPlaceholder(a) {
			return args[:i]
		}
	}
	return args
}

// isPlaceholder: RESOURCE, T, CMD in a synopsis.
func isPlaceholder(a string) bool {
	return regexp.MustCompile(`^[A-Z][A-Z_]*$`).MatchString(a)
}
