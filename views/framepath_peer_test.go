package views

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/kubectl/pkg/cmd/get"
	"k8s.io/kubectl/pkg/scheme"

	"github.com/sitecon/sitecon/kube"
)

// BenchmarkFramePathPeerKubectlGetPods is what a technician would run
// otherwise to see the same pods: `kubectl get pods -A`, timed from the
// answer it holds (the API server's Table of the 1,000 pods of siteData,
// decoded as kubectl decodes it) to the table printed, through kubectl's
// own printing path (get.TablePrinter over the printer `kubectl get`
// builds, written through kubectl's tab writer). Not timed, and all the
// peer's: the API server making the Table (its pod printer), encoding it
// and kubectl decoding the JSON; so this is less than kubectl takes, as
// BenchmarkFramePath leaves out the informers' decoding. Run both with
// -bench FramePath.
func BenchmarkFramePathPeerKubectlGetPods(b *testing.B) {
	u := podsTableAsKubectlHoldsIt(b, siteData().Pods)
	var out bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		out.Reset()
		// As `kubectl get pods -A` makes its printer (get.go, ToPrinter).
		flags := get.NewGetPrintFlags()
		if err := flags.EnsureWithNamespace(); err != nil {
			b.Fatal(err)
		}
		p, err := flags.ToPrinter()
		if err != nil {
			b.Fatal(err)
		}
		p, err = printers.NewTypeSetter(scheme.Scheme).WrapToPrinter(p, nil)
		if err != nil {
			b.Fatal(err)
		}
		p = &get.TablePrinter{Delegate: p}
		w := printers.GetNewTabWriter(&out)
		if err := p.PrintObj(u, w); err != nil {
			b.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if lines := strings.Count(out.String(), "\n"); lines != len(siteData().Pods)+1 {
		b.Fatalf("kubectl printed %d lines, want a header and %d pods:\n%.500s", lines, len(siteData().Pods), out.String())
	}
}

// podsTableAsKubectlHoldsIt is the API server's answer to `kubectl get
// pods -A` (a meta.k8s.io/v1 Table, each row with the pod's metadata, the
// cells as the server's pod printer makes them for running pods), decoded
// from JSON into the unstructured object kubectl's builder gives its
// printer.
func podsTableAsKubectlHoldsIt(b *testing.B, pods []*corev1.Pod) *unstructured.Unstructured {
	table := metav1.Table{
		TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"},
		ColumnDefinitions: []metav1.TableColumnDefinition{
			{Name: "Name", Type: "string", Format: "name"},
			{Name: "Ready", Type: "string"},
			{Name: "Status", Type: "string"},
			{Name: "Restarts", Type: "string"},
			{Name: "Age", Type: "string"},
			{Name: "IP", Type: "string", Priority: 1},
			{Name: "Node", Type: "string", Priority: 1},
			{Name: "Nominated Node", Type: "string", Priority: 1},
			{Name: "Readiness Gates", Type: "string", Priority: 1},
		},
	}
	for _, p := range pods {
		row := kube.PodRows([]*corev1.Pod{p})[0]
		meta, err := json.Marshal(metav1.PartialObjectMetadata{
			TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}, ObjectMeta: p.ObjectMeta})
		if err != nil {
			b.Fatal(err)
		}
		table.Rows = append(table.Rows, metav1.TableRow{
			Cells: []any{p.Name, row.Ready, row.Phase, int64(row.Restarts), duration.HumanDuration(now.Sub(p.CreationTimestamp.Time)),
				"<none>", p.Spec.NodeName, "<none>", "<none>"},
			Object: runtime.RawExtension{Raw: meta},
		})
	}
	data, err := json.Marshal(table)
	if err != nil {
		b.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		b.Fatal(err)
	}
	return u
}
