package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// buildVersion and buildCommit are stamped by the build (the Makefile's
// -ldflags -X); a plain `go build` leaves "dev" and the commit Go itself
// records from the checkout.
var (
	buildVersion = "dev"
	buildCommit  = ""
)

// The client libraries a field report needs to know: what API versions
// this binary speaks is decided by them, not by sitecon's own version.
const (
	clientGoModule = "k8s.io/client-go"
	kubeVirtModule = "kubevirt.io/client-go"
	longhornModule = "github.com/longhorn/longhorn-manager"
)

// versionInfo is what `sitecon version` reports.
type versionInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
	// The client libraries' module versions, as linked into this binary.
	Kubernetes string `json:"kubernetesClient"`
	KubeVirt   string `json:"kubevirtClient"`
	Longhorn   string `json:"longhornClient"`
}

// currentVersion reads the stamped values and the module versions Go
// records in every binary it builds.
func currentVersion() versionInfo {
	v := versionInfo{
		Version:    buildVersion,
		Commit:     buildCommit,
		Go:         runtime.Version(),
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
		Kubernetes: "unknown",
		KubeVirt:   "unknown",
		Longhorn:   "unknown",
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	for _, dep := range info.Deps {
		version := dep.Version
		if dep.Replace != nil {
			version = dep.Replace.Version
		}
		switch dep.Path {
		case clientGoModule:
			v.Kubernetes = version
		case kubeVirtModule:
			v.KubeVirt = version
		case longhornModule:
			v.Longhorn = version
		}
	}
	if v.Commit == "" {
		var revision, modified string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		v.Commit = revision
		if revision != "" && modified == "true" {
			v.Commit += "-dirty"
		}
	}
	if v.Commit == "" {
		v.Commit = "unknown"
	}
	return v
}

// write prints the report as aligned lines, as `kubectl version` does.
func (v versionInfo) write(w io.Writer) {
	fmt.Fprintf(w, "Version:     %s\nCommit:      %s\nGo:          %s %s\n", v.Version, v.Commit, v.Go, v.Platform)
	fmt.Fprintf(w, "Kubernetes:  %s %s\nKubeVirt:    %s %s\nLonghorn:    %s %s\n",
		clientGoModule, v.Kubernetes, kubeVirtModule, v.KubeVirt, longhornModule, v.Longhorn)
}

func newVersionCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print sitecon's version, commit, Go version and client library versions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := currentVersion()
			switch output {
			case "text":
				v.write(cmd.OutOrStdout())
				return nil
			case "json":
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			default:
				return fmt.Errorf("--output %q: use text or json", output)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}
