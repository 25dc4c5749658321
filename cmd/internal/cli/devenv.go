package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DevDir is where `ordo dev` keeps what it makes for itself, relative to
// the directory it runs in.
const DevDir = ".ordo"

// devEnvFile is the file in DevDir where `ordo dev` leaves the DATABASE_URL
// and ORDO_MASTER_KEYS it runs with (mode 0600, KEY=value lines), so that
// `ordo tenant …` and the other operator commands, run from the same
// directory, reach the running dev server's database with nothing set by
// hand.
const devEnvFile = "env"

// WriteDevEnv writes dir's env file for the operator commands.
func WriteDevEnv(dir, databaseURL, masterKeys string) error {
	text := "# Written by `ordo dev`: the operator commands (ordo tenant, credential, …) run\n" +
		"# from this directory read it when DATABASE_URL / ORDO_MASTER_KEYS are unset.\n" +
		"DATABASE_URL=" + databaseURL + "\nORDO_MASTER_KEYS=" + masterKeys + "\n"
	path := filepath.Join(dir, devEnvFile)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Chmod(path, 0o600) // an older file keeps its mode otherwise
}

// UseDevEnv fills DatabaseURL and MasterKeys, where the process left them
// unset, from the env file `ordo dev` wrote in e.DevDir. A missing file is
// no error (used false).
func (e *Env) UseDevEnv() (used bool, err error) {
	if e.DevDir == "" || (e.DatabaseURL != "" && e.MasterKeys != "") {
		return false, nil
	}
	path := filepath.Join(e.DevDir, devEnvFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, value, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		switch {
		case name == "DATABASE_URL" && e.DatabaseURL == "":
			e.DatabaseURL, used = value, true
		case name == "ORDO_MASTER_KEYS" && e.MasterKeys == "":
			e.MasterKeys, used = value, true
		}
	}
	return used, nil
}
