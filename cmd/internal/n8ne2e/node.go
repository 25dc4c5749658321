//go:build n8ne2e

package n8ne2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// nodePackageDir is the ordo community node's source in this repository.
func nodePackageDir(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "..", "web", "n8n", "n8n-nodes-ordo")
	if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
		t.Fatalf("the node package is not at %s: %v", dir, err)
	}
	return dir
}

// packNode builds, lints and packs n8n-nodes-ordo as a user of n8n's node
// CLI would (npm ci, npm run build, npm run lint, npm pack) in a copy
// under the cache, so that the repository gets no node_modules; the npm
// install is kept between runs while package-lock.json is unchanged. It
// returns the tarball's path.
func packNode(t *testing.T, out string) string {
	t.Helper()
	src := nodePackageDir(t)
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	work := filepath.Join(base, "ordo", "n8n-nodes-ordo-build")
	lock, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	must(t, err, "read package-lock.json")
	sum := sha256.Sum256(lock)
	stamp := hex.EncodeToString(sum[:])
	stampFile := filepath.Join(work, "node_modules", ".ordo-lock")
	if got, _ := os.ReadFile(stampFile); string(got) != stamp {
		must(t, os.RemoveAll(work), "clear %s", work)
	}
	must(t, os.MkdirAll(work, 0o755), "mkdir %s", work)
	// The sources, fresh each run (dist and node_modules stay out).
	must(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() && (rel == "node_modules" || rel == "dist") {
			return filepath.SkipDir
		}
		if d.IsDir() || strings.HasSuffix(rel, ".tgz") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		dst := filepath.Join(work, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	}), "copy the node package")
	must(t, os.RemoveAll(filepath.Join(work, "dist")), "clear dist")
	if _, err := os.Stat(stampFile); err != nil {
		npm(t, work, "ci", "--no-audit", "--no-fund", "--loglevel=error")
		must(t, os.WriteFile(stampFile, []byte(stamp), 0o644), "stamp the install")
	}
	npm(t, work, "run", "build")
	npm(t, work, "run", "lint")
	packed := strings.TrimSpace(npm(t, work, "pack", "--silent", "--pack-destination", out))
	lines := strings.Split(packed, "\n")
	return filepath.Join(out, strings.TrimSpace(lines[len(lines)-1]))
}

// installNode installs the packed node into n8n's user folder the way the
// README tells a self-hosted user to: npm install of the tarball in
// ~/.n8n/nodes, which n8n loads community packages from. n8n-workflow, its
// peer dependency, is n8n's own: not installed beside it.
func installNode(t *testing.T, n8nHome, tarball string) {
	t.Helper()
	dir := filepath.Join(n8nHome, ".n8n", "nodes")
	must(t, os.MkdirAll(dir, 0o755), "mkdir %s", dir)
	must(t, os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"installed-nodes","private":true}`+"\n"), 0o644), "nodes package.json")
	npm(t, dir, "install", "--no-audit", "--no-fund", "--loglevel=error", "--legacy-peer-deps", "--ignore-scripts", tarball)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "n8n-nodes-ordo", "dist", "nodes", "OrdoTrigger", "OrdoTrigger.node.js")); err != nil {
		t.Fatalf("n8n-nodes-ordo not installed: %v", err)
	}
}

// npm runs npm args in dir and returns its stdout; a failure ends the test
// with npm's output.
func npm(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("npm", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CI=true", "NO_COLOR=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("npm %s in %s: %v\n%s%s", strings.Join(args, " "), dir, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}
