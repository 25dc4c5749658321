package cli

import "runtime/debug"

// Build is the binary as Go recorded it: what `ordo version` prints and
// ordo_build_info exports.
type Build struct {
	Version    string `json:"version"`
	Go         string `json:"go,omitempty"`
	Commit     string `json:"commit,omitempty"`
	CommitTime string `json:"commit_time,omitempty"`
	Modified   string `json:"modified,omitempty"`
}

// ReadBuild reads the running binary's build information.
func ReadBuild() Build {
	b := Build{Version: "(devel)"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.Version, b.Go = bi.Main.Version, bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.time":
			b.CommitTime = s.Value
		case "vcs.modified":
			b.Modified = s.Value
		}
	}
	return b
}
