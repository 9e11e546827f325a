package node

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDoorsSpeakNode: the front doors and the CLI's check paths build on
// node's words, not transport's. Walking their non-test imports (go list
// -deps) without entering a package of node, no package of transport is
// reached; transport/pki (certificates and tokens, not the check vocabulary)
// is allowed. A door that imports transport again fails with the path.
func TestDoorsSpeakNode(t *testing.T) {
	t.Parallel()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command in PATH to list the doors' imports: %v", err)
	}
	const mod = "github.com/ringlimit/ringlimit/"
	doors := []string{
		"cmd/ringlimitd/internal/httpapi", "cmd/ringlimitd/internal/resp", "cmd/ringlimitd/internal/rls",
		"cmd/ringlimitd/internal/policyfile", "cmd/ringlimitd/internal/metrics", "cmd/ringlimitd/internal/auth",
		"cmd/ringlimitd/internal/config", "cmd/ringlimitd/internal/scope",
		"node/policy", "node/middleware", "node/failover",
		"cmd/ringlimit/internal/cli", "cmd/ringlimit/internal/bench", "cmd/ringlimit/internal/target",
		"cmd/ringlimit/internal/replay", "cmd/ringlimit/internal/redistarget",
	}
	args := []string{"list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}"}
	for _, d := range doors {
		args = append(args, mod+d)
	}
	cmd := exec.Command(goCmd, args...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		imports[f[0]] = f[1:]
	}
	isNode := func(p string) bool { return p == mod+"node" || strings.HasPrefix(p, mod+"node/") }
	isTransport := func(p string) bool {
		return (p == mod+"transport" || strings.HasPrefix(p, mod+"transport/")) && !strings.HasPrefix(p, mod+"transport/pki")
	}
	for _, d := range doors {
		from := map[string]string{mod + d: ""} // package -> the package that imported it
		queue := []string{mod + d}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			if isTransport(p) {
				path := p
				for q := from[p]; q != ""; q = from[q] {
					path = q + " -> " + path
				}
				t.Errorf("%s reaches transport without node: %s", d, path)
				break
			}
			if isNode(p) && p != mod+d {
				continue // through node: node converts at its boundary
			}
			for _, i := range imports[p] {
				if _, seen := from[i]; !seen && strings.HasPrefix(i, mod) {
					from[i] = p
					queue = append(queue, i)
				}
			}
		}
	}
}
