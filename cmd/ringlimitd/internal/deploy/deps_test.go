package deploy

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoKubernetesInBuilds: the Kubernetes and cert-manager modules serve
// these tests only. No package of the module, library or binary, imports
// them outside its tests, so neither an embedding service nor ringlimitd
// carries them.
func TestNoKubernetesInBuilds(t *testing.T) {
	t.Parallel()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command in PATH to list the build's packages: %v", err)
	}
	cmd := exec.Command(goCmd, "list", "-deps", "./...")
	cmd.Dir = moduleRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./...: %v", err)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 50 {
		t.Fatalf("go list -deps ./...: %d packages, want the whole build", len(pkgs))
	}
	for _, p := range pkgs {
		for _, prefix := range []string{"k8s.io/", "sigs.k8s.io/", "github.com/cert-manager/"} {
			if strings.HasPrefix(p, prefix) {
				t.Errorf("%s is in a build (not only in tests)", p)
			}
		}
	}
}
