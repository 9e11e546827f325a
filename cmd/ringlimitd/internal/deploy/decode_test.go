package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// manifestDir is where the manifests live, from the module root.
const manifestDir = "docs/kubernetes"

// manifestFiles are the files the docs name; each must exist and decode.
var manifestFiles = []string{"ringlimitd.yaml", "embedded-app.yaml", "cert-manager.yaml"}

// newDecoder returns a strict decoder of the API groups the manifests use:
// an unknown or misspelt field (field names are case-sensitive), a value of
// the wrong type, a duplicate field, or an unknown apiVersion or kind is an
// error, as the API server's strict field validation answers. It decodes
// only: no defaulting, no conversion.
func newDecoder(t testing.TB) runtime.Decoder {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, networkingv1.AddToScheme, cmv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}

// object is one decoded document of a manifest file.
type object struct {
	where string // file#index
	obj   runtime.Object
}

// decodeAll decodes every YAML document of data; documents holding only
// comments are skipped. The first error is returned, naming the document.
func decodeAll(dec runtime.Decoder, name string, data []byte) ([]object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []object
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s#%d: %w", name, i, err)
		}
		if j, err := yaml.YAMLToJSON(doc); err == nil && string(j) == "null" {
			continue // comments only
		}
		obj, gvk, err := dec.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s#%d (%v): %w", name, i, gvk, err)
		}
		out = append(out, object{fmt.Sprintf("%s#%d", name, i), obj})
	}
}

// moduleRoot returns the directory of go.mod above the test's directory.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test directory")
		}
		dir = parent
	}
}

// readManifest returns the text of a manifest file.
func readManifest(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(moduleRoot(t), manifestDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loadAll decodes every manifest file strictly, failing the test on any
// error, and returns the objects of all files.
func loadAll(t testing.TB) []object {
	t.Helper()
	dec := newDecoder(t)
	var all []object
	for _, f := range manifestFiles {
		objs, err := decodeAll(dec, f, readManifest(t, f))
		if err != nil {
			t.Fatalf("strict decoding: %v", err)
		}
		if len(objs) == 0 {
			t.Fatalf("%s: no object", f)
		}
		all = append(all, objs...)
	}
	return all
}

// TestManifestsDecodeStrictly decodes every YAML file in docs/kubernetes
// (not only the ones the docs name) into its Kubernetes or cert-manager type.
func TestManifestsDecodeStrictly(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(moduleRoot(t), manifestDir, "*.y*ml"))
	if err != nil || len(files) < len(manifestFiles) {
		t.Fatalf("manifests in %s: got %v, %v; want at least %v", manifestDir, files, err, manifestFiles)
	}
	dec := newDecoder(t)
	kinds := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeAll(dec, filepath.Base(f), b)
		if err != nil {
			t.Errorf("strict decoding: %v", err)
			continue
		}
		for _, o := range objs {
			kinds[fmt.Sprintf("%T", o.obj)]++
		}
	}
	for _, want := range []string{"*v1.StatefulSet", "*v1.Service", "*v1.PodDisruptionBudget", "*v1.NetworkPolicy", "*v1.Certificate", "*v1.Issuer"} {
		if kinds[want] == 0 {
			t.Errorf("decoded kinds %v: none of %s", kinds, want)
		}
	}
}

// TestStrictDecodingRefuses proves the decoder above would catch the
// mistakes a hand-written manifest makes: each mutation of the ringlimitd
// StatefulSet (or of a cert-manager Certificate) must fail to decode, while
// the unmutated document decodes.
func TestStrictDecodingRefuses(t *testing.T) {
	t.Parallel()
	dec := newDecoder(t)
	doc := func(file, kind string) string {
		for _, d := range strings.Split(string(readManifest(t, file)), "\n---\n") {
			if strings.Contains(d, "\nkind: "+kind+"\n") {
				return d
			}
		}
		t.Fatalf("%s: no %s", file, kind)
		return ""
	}
	sts, cert := doc("ringlimitd.yaml", "StatefulSet"), doc("cert-manager.yaml", "Certificate")
	for _, d := range []string{sts, cert} {
		if _, err := decodeAll(dec, "unmutated", []byte(d)); err != nil {
			t.Fatalf("unmutated document: %v", err)
		}
	}
	for _, tc := range []struct {
		name, doc, old, new, want string
	}{
		{"misspelt field", sts, "terminationGracePeriodSeconds: 30", "terminationGracePeriod: 30", "unknown field \"spec.template.spec.terminationGracePeriod\""},
		{"field in the wrong case", sts, "readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true", "unknown field \"spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem\""},
		{"field at the wrong level", sts, "      automountServiceAccountToken: false", "      runAsNonRoot: true", "unknown field \"spec.template.spec.runAsNonRoot\""},
		{"string for an integer", sts, "replicas: 3", "replicas: three", "cannot unmarshal string"},
		{"string for a bool", sts, "allowPrivilegeEscalation: false", `allowPrivilegeEscalation: "no"`, "cannot unmarshal string"},
		{"list for a map", sts, "    matchLabels:\n      app.kubernetes.io/name: ringlimit\n  template:", "    matchLabels:\n      - ringlimit\n  template:", "cannot unmarshal array"},
		{"duplicate field", sts, "  replicas: 3\n", "  replicas: 3\n  replicas: 5\n", "already set"},
		{"unknown kind", sts, "kind: StatefulSet", "kind: StatefulSets", "no kind \"StatefulSets\""},
		{"unknown version", sts, "apiVersion: apps/v1", "apiVersion: apps/v2", "\"apps/v2\""},
		{"cert-manager field misspelt", cert, "secretName: ringlimit-ca", "secretname: ringlimit-ca", "unknown field \"spec.secretname\""},
		{"cert-manager wrong type", cert, "isCA: true", "isCA: [true]", "cannot unmarshal array"},
	} {
		if !strings.Contains(tc.doc, tc.old) {
			t.Fatalf("%s: the document has no %q to mutate", tc.name, tc.old)
		}
		mutated := strings.Replace(tc.doc, tc.old, tc.new, 1)
		if _, err := decodeAll(dec, tc.name, []byte(mutated)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}
