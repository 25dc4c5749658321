// Command vulndb turns the Go vulnerability database as the module proxy
// serves it (golang.org/x/vulndb: one OSV JSON file per entry under
// data/osv) into the layout govulncheck reads with -db file:///…: index/db.json,
// index/modules.json, index/vulns.json and ID/<id>.json
// (https://go.dev/security/vuln/database#api). `make lint` runs it once per
// pinned database version, so govulncheck works offline and the same
// database gives the same answer everywhere.
//
//	go run ./cmd/internal/vulndb -module golang.org/x/vulndb@<version> -out <dir>
//
// (-osv <dir> reads entries already at hand instead of the module.)
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// entry is the part of an OSV entry the index holds.
type entry struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Aliases  []string  `json:"aliases,omitempty"`
	Affected []struct {
		Package struct {
			Name string `json:"name"`
		} `json:"package"`
	} `json:"affected"`
}

type moduleVuln struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
}

type module struct {
	Path  string       `json:"path"`
	Vulns []moduleVuln `json:"vulns"`
}

type vuln struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Aliases  []string  `json:"aliases,omitempty"`
}

func main() {
	mod := flag.String("module", "", "golang.org/x/vulndb@<version>: fetched through the module proxy (go mod download)")
	osvDir := flag.String("osv", "", "the OSV entries at hand (data/osv of golang.org/x/vulndb), instead of -module")
	out := flag.String("out", "", "the database directory to write (required)")
	flag.Parse()
	if (*mod == "") == (*osvDir == "") || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	var modified time.Time
	if *mod != "" {
		dir, err := download(*mod)
		if err != nil {
			fmt.Fprintln(os.Stderr, "vulndb:", err)
			os.Exit(1)
		}
		*osvDir = filepath.Join(dir, "data", "osv")
		modified = pseudoVersionTime(*mod)
	}
	if err := build(*osvDir, *out, modified); err != nil {
		fmt.Fprintln(os.Stderr, "vulndb:", err)
		os.Exit(1)
	}
}

// download fetches module@version into the module cache and returns its
// directory.
func download(modVersion string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", modVersion)
	cmd.Dir = os.TempDir() // outside any module: go.mod and go.sum stay as they are
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w: %s", modVersion, err, stderr.String())
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(b, &m); err != nil || m.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s (%v)", modVersion, m.Error, err)
	}
	return m.Dir, nil
}

// pseudoVersionTime is the commit time in a pseudo-version
// (v0.0.0-20261105234957-e22db6528018), or zero.
func pseudoVersionTime(modVersion string) time.Time {
	parts := strings.Split(modVersion, "-")
	if len(parts) < 3 {
		return time.Time{}
	}
	t, _ := time.Parse("20060102150405", parts[len(parts)-2])
	return t
}

// build writes the database into a temporary directory beside out and
// renames it into place: a run cut short leaves no half database.
// The entries in the repository carry no modification times (the
// database's server adds them); db.json gets modified, the commit's time.
func build(osvDir, out string, modified time.Time) error {
	files, err := filepath.Glob(filepath.Join(osvDir, "GO-*.json"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no GO-*.json entries in %s (%v)", osvDir, err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".vulndb-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.MkdirAll(filepath.Join(tmp, "ID"), 0o755); err != nil {
		return err
	}
	modules := map[string]*module{}
	var vulns []vuln
	newest := modified
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var e entry
		if err := json.Unmarshal(b, &e); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if e.ID == "" || !strings.HasPrefix(filepath.Base(f), e.ID) {
			return fmt.Errorf("%s: id %q does not match the file", f, e.ID)
		}
		if err := os.WriteFile(filepath.Join(tmp, "ID", e.ID+".json"), b, 0o644); err != nil {
			return err
		}
		vulns = append(vulns, vuln{ID: e.ID, Modified: e.Modified, Aliases: e.Aliases})
		if e.Modified.After(newest) {
			newest = e.Modified
		}
		seen := map[string]bool{}
		for _, a := range e.Affected {
			p := a.Package.Name
			if p == "" || seen[p] {
				continue
			}
			seen[p] = true
			if modules[p] == nil {
				modules[p] = &module{Path: p}
			}
			modules[p].Vulns = append(modules[p].Vulns, moduleVuln{ID: e.ID, Modified: e.Modified})
		}
	}
	mods := make([]*module, 0, len(modules))
	for _, m := range modules {
		mods = append(mods, m)
	}
	slices.SortFunc(mods, func(a, b *module) int { return strings.Compare(a.Path, b.Path) })
	slices.SortFunc(vulns, func(a, b vuln) int { return strings.Compare(a.ID, b.ID) })
	if err := os.MkdirAll(filepath.Join(tmp, "index"), 0o755); err != nil {
		return err
	}
	for name, v := range map[string]any{"db.json": map[string]time.Time{"modified": newest}, "modules.json": mods, "vulns.json": vulns} {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(tmp, "index", name), b, 0o644); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
