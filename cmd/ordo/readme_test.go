package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
)

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// ReadmeMaxLines bounds the README: it is for users; reference material
// lives beside the code it describes.
const ReadmeMaxLines = 400

// mdLink matches a Markdown link or image target.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// The README fits, and every repository file it or the documents it links
// to name exists.
func TestReadmeLinks(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(readme, []byte("\n")); n > ReadmeMaxLines {
		t.Errorf("README.md has %d lines, want at most %d", n, ReadmeMaxLines)
	}
	docs := []string{"README.md"}
	seen := map[string]bool{"README.md": true}
	for i := 0; i < len(docs); i++ {
		doc := docs[i]
		b, err := os.ReadFile(filepath.Join(repoRoot, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllSubmatch(b, -1) {
			target := string(m[1])
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			path := filepath.Join(filepath.Dir(doc), target)
			if _, err := os.Stat(filepath.Join(repoRoot, path)); err != nil {
				t.Errorf("%s links to %s, which does not exist", doc, target)
				continue
			}
			if strings.HasSuffix(path, ".md") && !seen[path] {
				seen[path] = true
				docs = append(docs, path)
			}
		}
	}
}

// ordoLine finds `bin/ordo …` command lines: the command, its action and
// the flags, up to the end of the shell command.
var ordoLine = regexp.MustCompile(`bin/ordo((?: +[^ |;#` + "`" + `\\"'\n]+)*)`)

// Every `bin/ordo …` line the README and make dev's banner print names a
// command, action and flags that exist: each is checked against the
// command's own --help.
func TestReadmeCommandsExist(t *testing.T) {
	t.Parallel()
	var sources []string
	for _, f := range []string{filepath.Join(repoRoot, "README.md"), "dev.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, string(b))
	}
	checked := 0
	for _, src := range sources {
		for _, m := range ordoLine.FindAllStringSubmatch(src, -1) {
			words := strings.Fields(m[1])
			if len(words) == 0 || strings.ContainsAny(m[1], "<[") {
				continue // prose: bin/ordo <command> [action]
			}
			var path, flags []string
			for _, w := range words {
				switch {
				case strings.HasPrefix(w, "--"):
					name, _, _ := strings.Cut(w, "=")
					flags = append(flags, name)
				case len(flags) == 0 && len(path) < 2:
					path = append(path, w)
				}
			}
			var out bytes.Buffer
			env := &cli.Env{Stdout: &out, Stderr: &out, Logger: slog.New(slog.DiscardHandler)}
			code := run(context.Background(), env, append(path, "--help"))
			if code != 0 || !strings.Contains(out.String(), "usage: ordo") {
				t.Errorf("%q: ordo %s --help exits %d:\n%s", m[0], strings.Join(path, " "), code, out.String())
				continue
			}
			if len(path) > 0 {
				if _, ok := helpActions[path[0]]; ok && (len(path) < 2 || !contains(helpActions[path[0]], path[1])) {
					t.Errorf("%q: %q is not an action of ordo %s", m[0], strings.Join(path[1:], " "), path[0])
				}
			}
			for _, f := range flags {
				if f == "--help" {
					continue
				}
				if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(f[1:]) + `\b`).MatchString(out.String()) {
					t.Errorf("%q: ordo %s has no flag %s", m[0], strings.Join(path, " "), f)
				}
			}
			checked++
		}
	}
	if checked < 8 {
		t.Fatalf("only %d bin/ordo lines found: the pattern no longer matches the README", checked)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
