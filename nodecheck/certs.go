package nodecheck

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sitecon/sitecon/kube/nodestate"
)

// certDirs are the directories under k3s's data dir that hold the
// certificates k3s renews: the server's and the agent's.
var certDirs = []string{filepath.Join("server", "tls"), "agent"}

// ReadCerts parses every *.crt under dataDir's server/tls and agent
// directories; each file's expiry is the earliest of the certificates in
// it (k3s's client certificates carry their CA after them). A directory
// that is missing is skipped; found reports whether any was there.
func ReadCerts(dataDir string) (certs []nodestate.CertFile, found bool, err error) {
	for _, d := range certDirs {
		root := filepath.Join(dataDir, d)
		if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, false, err
		}
		found = true
		err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".crt") {
				return nil
			}
			certs = append(certs, readCert(path))
			return nil
		})
		if err != nil {
			return nil, found, err
		}
	}
	return certs, found, nil
}

// readCert reads one file: the subject is the first certificate's (the
// leaf), the expiry the earliest of all.
func readCert(path string) nodestate.CertFile {
	c := nodestate.CertFile{Path: path}
	data, err := os.ReadFile(path)
	if err != nil {
		c.Problem = err.Error()
		return c
	}
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			c.Problem = err.Error()
			return c
		}
		if c.NotAfter.IsZero() {
			c.Subject = cert.Subject.CommonName
		}
		if c.NotAfter.IsZero() || cert.NotAfter.Before(c.NotAfter) {
			c.NotAfter = cert.NotAfter
		}
	}
	if c.NotAfter.IsZero() {
		c.Problem = "no PEM certificate in it"
	}
	return c
}

// Certs is the report of dataDir's certificates.
func Certs(dataDir string) nodestate.CertsReport {
	r := nodestate.CertsReport{DataDir: dataDir}
	if dataDir == "" {
		r.Problem = "no k3s data dir given to the agent"
		return r
	}
	files, found, err := ReadCerts(dataDir)
	if err != nil {
		r.Problem = err.Error()
	}
	// The report has a size bound: the files that cannot be read and
	// those that expire first are kept, the rest counted.
	slices.SortStableFunc(files, func(a, b nodestate.CertFile) int {
		if (a.Problem != "") != (b.Problem != "") {
			if a.Problem != "" {
				return -1
			}
			return 1
		}
		return a.NotAfter.Compare(b.NotAfter)
	})
	if len(files) > MaxReportedCerts {
		r.Omitted = len(files) - MaxReportedCerts
		files = files[:MaxReportedCerts]
	}
	r.Found, r.Files = found, files
	return r
}

// MaxReportedCerts bounds the files a report lists (k3s keeps about 50).
const MaxReportedCerts = 200
