// Package bundle is `sitecon bundle`: one archive (tar.gz) with what a
// support engineer needs to see a site's trouble, taken when it is most
// needed, which is often while a node or the cluster API is down.
//
// Every part is a Source with a deadline of its own, run side by side: a
// node whose agent does not answer, or an API server that does not, is
// listed as missing in the archive's manifest.json (with why), and the
// rest still arrive. Nothing is created in the cluster: the sources only
// read (LIST and GET; the nodes' agents are asked GET /status).
//
// Secrets never enter it: no Secret is collected; the values of the
// fields that hold tokens and passwords are replaced, and every known
// secret value (the cluster token, the data of every Secret the
// collector could read) is scrubbed from every file, as written and in
// base64 (redact.go). The contents are capped (Options.MaxBytes); what
// was cut or left out is listed in the manifest (archive.go).
package bundle

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Item is one file of the bundle.
type Item struct {
	// Name is its path inside the archive, below the bundle's directory
	// ("cluster/nodes.json").
	Name string
	// Source says where it came from (an API kind, a URL, a path).
	Source string
	Data   []byte
	// Tail: Data is the end of a log; under the size cap it is cut from
	// its start (its newest lines stay) rather than left out.
	Tail bool
	// order is the rank of its source: earlier sources keep their files
	// when the cap cuts.
	order int
}

// Missing is a part of the bundle that did not arrive, and why.
type Missing struct {
	Item string `json:"item"`
	Why  string `json:"why"`
}

// Source is one part of the bundle.
type Source struct {
	// Name is what it is, for the manifest ("nodes", "agent node-b").
	Name string
	// Deadline bounds it; past it the source is listed as missing.
	Deadline time.Duration
	// Collect returns the files it made and the parts of it that did not
	// arrive; an error means none of it did.
	Collect func(ctx context.Context) ([]Item, []Missing, error)
}

// Collect runs every source at once, each within its deadline (and
// ctx's), and returns their files in the sources' order and what is
// missing. A source that overruns is left to finish on its own: it only
// reads, and its context has ended.
func Collect(ctx context.Context, sources []Source) ([]Item, []Missing) {
	type result struct {
		items   []Item
		missing []Missing
	}
	results := make([]result, len(sources))
	var wg sync.WaitGroup
	for i, s := range sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, s.Deadline)
			defer cancel()
			out := make(chan result, 1)
			go func() {
				defer func() {
					if p := recover(); p != nil {
						out <- result{missing: []Missing{{Item: s.Name, Why: fmt.Sprintf("its collection failed: %v", p)}}}
					}
				}()
				items, missing, err := s.Collect(sctx)
				if err != nil {
					missing = append(missing, Missing{Item: s.Name, Why: err.Error()})
				}
				out <- result{items, missing}
			}()
			select {
			case r := <-out:
				results[i] = r
			case <-sctx.Done():
				why := fmt.Sprintf("did not finish within its deadline of %s", s.Deadline)
				if ctx.Err() != nil {
					why = "the bundle's --timeout ran out first"
				}
				results[i] = result{missing: []Missing{{Item: s.Name, Why: why}}}
			}
		}()
	}
	wg.Wait()
	var items []Item
	var missing []Missing
	for i, r := range results {
		for _, it := range r.items {
			it.order = i
			items = append(items, it)
		}
		missing = append(missing, r.missing...)
	}
	sort.SliceStable(items, func(a, b int) bool { return items[a].order < items[b].order })
	return items, missing
}
