package deploy

import (
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ringlimit/ringlimit/cmd/ringlimitd/internal/config"
	"github.com/ringlimit/ringlimit/node"
)

// Grace period bound: the kubelet counts the preStop hook inside
// terminationGracePeriodSeconds, then SIGTERM starts the graceful stop, which
// ringlimitd bounds by --shutdown-timeout (HTTP drain, then node.Close: the
// handoff of every key, at most node.Config.HandoffTimeout, and the leave,
// all within node.Config.CloseTimeout = --shutdown-timeout). graceMargin is
// what is left for the process to exit before SIGKILL.
const graceMargin = 5 * time.Second

// appHTTPDrain is how long the embedding example (node's
// Example_kubernetes) gives its HTTP server to drain before node.Close.
const appHTTPDrain = 5 * time.Second

// csiAttributes are the volume attributes cert-manager's csi-driver knows
// (github.com/cert-manager/csi-driver, pkg/apis/v1alpha1): the driver
// refuses others, and the map is not typed, so the decoder cannot check it.
var csiAttributes = []string{
	"issuer-name", "issuer-kind", "issuer-group", "literal-subject", "common-name", "organizations",
	"organizationalunits", "countries", "provinces", "localities", "streetaddresses", "postalcodes",
	"serialnumber", "dns-names", "ip-sans", "uri-sans", "duration", "is-ca", "key-usages",
	"key-algorithm", "key-encoding", "key-size", "ca-file", "certificate-file", "privatekey-file",
	"fs-group", "renew-before", "reuse-private-key", "pkcs12-enable", "pkcs12-filename", "pkcs12-password",
}

// manifests is every decoded object, by type.
type manifests struct {
	sets     []*appsv1.StatefulSet
	services []*corev1.Service
	pdbs     []*policyv1.PodDisruptionBudget
	netpols  []*networkingv1.NetworkPolicy
	certs    []*cmv1.Certificate
	issuers  map[string]*cmv1.Issuer
	accounts map[string]*corev1.ServiceAccount
}

func load(t *testing.T) manifests {
	t.Helper()
	m := manifests{issuers: map[string]*cmv1.Issuer{}, accounts: map[string]*corev1.ServiceAccount{}}
	for _, o := range loadAll(t) {
		switch v := o.obj.(type) {
		case *appsv1.StatefulSet:
			m.sets = append(m.sets, v)
		case *corev1.Service:
			m.services = append(m.services, v)
		case *policyv1.PodDisruptionBudget:
			m.pdbs = append(m.pdbs, v)
		case *networkingv1.NetworkPolicy:
			m.netpols = append(m.netpols, v)
		case *cmv1.Certificate:
			m.certs = append(m.certs, v)
		case *cmv1.Issuer:
			m.issuers[v.Name] = v
		case *corev1.ServiceAccount:
			m.accounts[v.Name] = v
		default:
			t.Fatalf("%s: %T has no property check here; add one", o.where, v)
		}
	}
	return m
}

// set returns the StatefulSet named name.
func (m manifests) set(t *testing.T, name string) *appsv1.StatefulSet {
	t.Helper()
	for _, s := range m.sets {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no StatefulSet %q", name)
	return nil
}

func (m manifests) service(name string) *corev1.Service {
	for _, s := range m.services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// TestWorkloadProperties checks what docs/kubernetes.md promises of every
// StatefulSet: a non-root, read-only, capability-free pod under
// RuntimeDefault seccomp with no API token; readiness on /readyz and
// liveness on /healthz; parallel pod management (a member is ready only
// once it has joined another); a headless Service listing unready pods with
// the gossip (TCP and UDP) and peer ports; a PodDisruptionBudget allowing
// one member down; a NetworkPolicy keeping the gossip and peer ports to
// members; a member certificate naming the pod; and a grace period that
// covers the preStop hook and the graceful stop.
func TestWorkloadProperties(t *testing.T) {
	t.Parallel()
	m := load(t)
	if len(m.sets) < 2 {
		t.Fatalf("StatefulSets: got %d, want ringlimitd's and the embedding app's", len(m.sets))
	}
	shutdown := map[string]time.Duration{
		"ringlimit": daemonShutdown(t, m.set(t, "ringlimit")),
		"quota-api": appHTTPDrain + node.DefaultConfig().CloseTimeout,
	}
	for _, s := range m.sets {
		t.Run(s.Name, func(t *testing.T) {
			bound, ok := shutdown[s.Name]
			if !ok {
				t.Fatalf("no graceful-stop bound known for StatefulSet %q", s.Name)
			}
			checkPod(t, s)
			checkGrace(t, s, bound)
			checkPeers(t, m, s)
			checkPDB(t, m, s)
			checkNetworkPolicy(t, m, s)
			checkMemberCertificate(t, m, s)
		})
	}
}

func checkPod(t *testing.T, s *appsv1.StatefulSet) {
	t.Helper()
	pod := s.Spec.Template.Spec
	if s.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy: got %q, want Parallel (OrderedReady waits for the first member, never ready alone)", s.Spec.PodManagementPolicy)
	}
	if s.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		t.Errorf("updateStrategy: got %q, want RollingUpdate", s.Spec.UpdateStrategy.Type)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("automountServiceAccountToken: want false (members never call the API)")
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Fatalf("pod securityContext %+v: want runAsNonRoot and a non-zero runAsUser", psc)
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccompProfile: got %+v, want RuntimeDefault", psc.SeccompProfile)
	}
	if psc.FSGroup == nil || psc.RunAsGroup == nil || *psc.FSGroup != *psc.RunAsGroup {
		t.Errorf("fsGroup %v, runAsGroup %v: want equal, so the mounted key files (0440, group fsGroup) are the process's own group's", psc.FSGroup, psc.RunAsGroup)
	}
	if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
		t.Fatalf("containers: got %d (+%d init), want one", len(pod.Containers), len(pod.InitContainers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("container securityContext: none")
	}
	switch {
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("readOnlyRootFilesystem: want true")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation: want false")
	case sc.Privileged != nil && *sc.Privileged:
		t.Error("privileged: want unset or false")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Error("container runAsNonRoot: want true")
	case sc.RunAsUser != nil && *sc.RunAsUser == 0:
		t.Error("container runAsUser: 0")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("capabilities: got %+v, want drop [ALL], add none", sc.Capabilities)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s probe: got %+v, want GET %s", p.name, p.probe, p.path)
			continue
		}
		if _, ok := containerPort(c, p.probe.HTTPGet.Port); !ok {
			t.Errorf("%s probe port %v: not a port of the container", p.name, p.probe.HTTPGet.Port.String())
		}
	}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			t.Errorf("volume %q: hostPath", v.Name)
		}
	}
}

// containerPort resolves a probe's or Service's target port (a name or a
// number) to the container's port.
func containerPort(c corev1.Container, p intstr.IntOrString) (corev1.ContainerPort, bool) {
	for _, cp := range c.Ports {
		if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
			return cp, true
		}
	}
	return corev1.ContainerPort{}, false
}

// checkGrace: preStop sleep + the graceful stop + graceMargin must fit in
// terminationGracePeriodSeconds.
func checkGrace(t *testing.T, s *appsv1.StatefulSet, shutdown time.Duration) {
	t.Helper()
	pod := s.Spec.Template.Spec
	c := pod.Containers[0]
	var preStop time.Duration
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds <= 0 {
		t.Errorf("preStop: got %+v, want a sleep while the Services drop the pod (the image has no shell)", c.Lifecycle)
	} else {
		preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	if shutdown < 2*node.DefaultConfig().HandoffTimeout {
		t.Errorf("graceful stop %v: want at least twice HandoffTimeout %v (the handoff, and a leave as long)", shutdown, node.DefaultConfig().HandoffTimeout)
	}
	bound := preStop + shutdown + graceMargin
	var grace time.Duration
	if pod.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	}
	if grace < bound {
		t.Errorf("terminationGracePeriodSeconds: got %v, want at least %v (preStop %v + graceful stop %v + %v)",
			grace, bound, preStop, shutdown, graceMargin)
	}
}

// checkPeers: the StatefulSet's governing Service is headless, lists pods
// before they are ready, selects the pods, and carries gossip over TCP and
// UDP and the peer port; the client Service (if any) exposes neither.
func checkPeers(t *testing.T, m manifests, s *appsv1.StatefulSet) {
	t.Helper()
	c := s.Spec.Template.Spec.Containers[0]
	podLabels := labels.Set(s.Spec.Template.Labels)
	svc := m.service(s.Spec.ServiceName)
	if svc == nil {
		t.Fatalf("serviceName %q: no such Service", s.Spec.ServiceName)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: clusterIP %q, publishNotReadyAddresses %v; want None, true", svc.Name, svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses)
	}
	if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Errorf("Service %s selector %v: does not select the pods %v", svc.Name, svc.Spec.Selector, podLabels)
	}
	want := map[string]bool{"gossip/TCP": false, "gossip/UDP": false, "peer/TCP": false}
	for _, p := range svc.Spec.Ports {
		cp, ok := containerPort(c, p.TargetPort)
		if !ok || cp.Protocol != p.Protocol || cp.ContainerPort != p.Port {
			t.Errorf("Service %s port %s: target %v is not the container's %s port %d", svc.Name, p.Name, p.TargetPort.String(), p.Protocol, p.Port)
			continue
		}
		want[strings.TrimSuffix(cp.Name, "-udp")+"/"+string(cp.Protocol)] = true
	}
	for k, ok := range want {
		if !ok {
			t.Errorf("Service %s: no %s port", svc.Name, k)
		}
	}
	for _, other := range m.services {
		if other == svc || !labels.SelectorFromSet(other.Spec.Selector).Matches(podLabels) {
			continue
		}
		for _, p := range other.Spec.Ports {
			if cp, ok := containerPort(c, p.TargetPort); !ok || cp.Name == "gossip" || cp.Name == "gossip-udp" || cp.Name == "peer" || cp.Name == "admin" {
				t.Errorf("client Service %s exposes %v: want only client ports", other.Name, p.TargetPort.String())
			}
		}
	}
}

// checkPDB: one PodDisruptionBudget selects the pods and lets one go.
func checkPDB(t *testing.T, m manifests, s *appsv1.StatefulSet) {
	t.Helper()
	var found []*policyv1.PodDisruptionBudget
	for _, p := range m.pdbs {
		if p.Spec.Selector != nil && labels.SelectorFromSet(p.Spec.Selector.MatchLabels).Matches(labels.Set(s.Spec.Template.Labels)) {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		t.Fatalf("PodDisruptionBudgets selecting %s: got %d, want 1", s.Name, len(found))
	}
	p := found[0]
	if p.Spec.MaxUnavailable == nil || *p.Spec.MaxUnavailable != intstr.FromInt32(1) || p.Spec.MinAvailable != nil {
		t.Errorf("PDB %s: maxUnavailable %v, minAvailable %v; want maxUnavailable 1 (owner and backup of a key never both evicted)", p.Name, p.Spec.MaxUnavailable, p.Spec.MinAvailable)
	}
	if p.Spec.UnhealthyPodEvictionPolicy == nil || *p.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
		t.Errorf("PDB %s: unhealthyPodEvictionPolicy %v; want AlwaysAllow (a stuck member never blocks a drain)", p.Name, p.Spec.UnhealthyPodEvictionPolicy)
	}
}

// checkNetworkPolicy: a policy selects the pods, and every rule that admits
// the gossip or peer port admits the members only.
func checkNetworkPolicy(t *testing.T, m manifests, s *appsv1.StatefulSet) {
	t.Helper()
	podLabels := labels.Set(s.Spec.Template.Labels)
	covered := map[string]bool{}
	for _, np := range m.netpols {
		if !labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(podLabels) {
			continue
		}
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				if p.Port == nil || (p.Port.IntVal != 7946 && p.Port.IntVal != 7947) {
					continue
				}
				members := len(rule.From) > 0
				for _, f := range rule.From {
					if f.PodSelector == nil || f.IPBlock != nil || f.NamespaceSelector != nil ||
						!labels.SelectorFromSet(f.PodSelector.MatchLabels).Matches(podLabels) {
						members = false
					}
				}
				if !members {
					t.Errorf("NetworkPolicy %s admits port %v from %+v: want the members only", np.Name, p.Port.String(), rule.From)
				}
				covered[fmt.Sprintf("%d/%s", p.Port.IntVal, *p.Protocol)] = true
			}
		}
	}
	for _, k := range []string{"7946/TCP", "7946/UDP", "7947/TCP"} {
		if !covered[k] {
			t.Errorf("no NetworkPolicy admits %s from the members (then every source is refused, or the pods are not isolated)", k)
		}
	}
}

// checkMemberCertificate: the member certificate comes from cert-manager's
// csi-driver with attributes it knows, names the pod as a ringlimit member
// (the pod name is the member name), carries both usages a member needs, and
// is signed by an Issuer of these manifests.
func checkMemberCertificate(t *testing.T, m manifests, s *appsv1.StatefulSet) {
	t.Helper()
	var csi *corev1.CSIVolumeSource
	for _, v := range s.Spec.Template.Spec.Volumes {
		if v.CSI != nil && v.CSI.Driver == "csi.cert-manager.io" {
			csi = v.CSI
		}
	}
	if csi == nil {
		t.Fatal("no csi.cert-manager.io volume: no member certificate")
	}
	for k := range csi.VolumeAttributes {
		name, ok := strings.CutPrefix(k, "csi.cert-manager.io/")
		if !ok || !slices.Contains(csiAttributes, name) {
			t.Errorf("volume attribute %q: not one csi-driver knows", k)
		}
	}
	attr := func(k string) string { return csi.VolumeAttributes["csi.cert-manager.io/"+k] }
	if got := attr("uri-sans"); got != "ringlimit://member/${POD_NAME}" {
		t.Errorf("uri-sans: got %q, want ringlimit://member/${POD_NAME} (the member name is the pod name)", got)
	}
	usages := strings.Split(attr("key-usages"), ",")
	for _, u := range []string{"server auth", "client auth"} {
		if !slices.Contains(usages, u) {
			t.Errorf("key-usages %q: no %q (pki.MemberName needs both)", attr("key-usages"), u)
		}
	}
	if attr("issuer-kind") != "Issuer" || m.issuers[attr("issuer-name")] == nil || m.issuers[attr("issuer-name")].Spec.CA == nil {
		t.Errorf("issuer %s %q: want a CA Issuer of cert-manager.yaml", attr("issuer-kind"), attr("issuer-name"))
	}
	if fsg := s.Spec.Template.Spec.SecurityContext.FSGroup; fsg == nil || attr("fs-group") != strconv.FormatInt(*fsg, 10) {
		t.Errorf("fs-group %q: want the pod's fsGroup %v, or the non-root process cannot read tls.key", attr("fs-group"), fsg)
	}
}

// daemonShutdown checks the ringlimitd container's configuration as the
// daemon reads it (every RINGLIMIT_* variable a flag, the result valid) and
// its ties to the rest of the manifest, and returns --shutdown-timeout.
func daemonShutdown(t *testing.T, s *appsv1.StatefulSet) time.Duration {
	t.Helper()
	c := s.Spec.Template.Spec.Containers[0]
	env := podEnv(t, c, map[string]string{"metadata.name": s.Name + "-0", "status.podIP": "10.1.2.3"})
	fs := pflag.NewFlagSet("ringlimitd", pflag.ContinueOnError)
	def := config.Default()
	def.Register(fs)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if name, ok := strings.CutPrefix(k, config.EnvPrefix); ok && fs.Lookup(strings.ToLower(strings.ReplaceAll(name, "_", "-"))) == nil {
			t.Errorf("env %s: no such flag (the daemon would ignore it)", k)
		}
	}
	cfg, err := config.Load(c.Args, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("the daemon refuses the manifest's configuration: %v", err)
	}
	if cfg.NodeName != s.Name+"-0" {
		t.Errorf("member name: got %q, want the pod name %q", cfg.NodeName, s.Name+"-0")
	}
	if cfg.Insecure {
		t.Error("--insecure in a deployment manifest")
	}
	seedOK := false
	for _, j := range cfg.Join {
		host, port, err := net.SplitHostPort(j)
		if err == nil && strings.Split(host, ".")[0] == s.Spec.ServiceName && port == strconv.Itoa(cfg.GossipPort) {
			seedOK = true
		}
	}
	if !seedOK {
		t.Errorf("join %v: want the headless Service %s at the gossip port %d", cfg.Join, s.Spec.ServiceName, cfg.GossipPort)
	}
	ports := map[string]int{"gossip": cfg.GossipPort, "gossip-udp": cfg.GossipPort, "peer": cfg.PeerPort, "grpc": cfg.GRPCPort, "https": cfg.HTTPPort, "admin": cfg.AdminPort}
	for _, cp := range c.Ports {
		if want, ok := ports[cp.Name]; !ok || int(cp.ContainerPort) != want {
			t.Errorf("container port %s %d: the daemon listens on %d", cp.Name, cp.ContainerPort, want)
		}
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if cp, _ := containerPort(c, p.HTTPGet.Port); cp.Name != "admin" {
			t.Errorf("probe on port %v: want the admin port (the only plain-HTTP one)", p.HTTPGet.Port.String())
		}
	}
	// Each TLS file comes from the volume of its kind, under cert-manager's name.
	for _, f := range []struct {
		path, base string
		from       func(corev1.Volume) bool
	}{
		{cfg.TLSCertFile, "tls.crt", func(v corev1.Volume) bool { return v.CSI != nil }},
		{cfg.TLSKeyFile, "tls.key", func(v corev1.Volume) bool { return v.CSI != nil }},
		{cfg.TLSCAFile, "ca.crt", func(v corev1.Volume) bool { return v.Secret != nil && hasItem(v.Secret, "ca.crt") }},
		{cfg.GossipKeyFile, "gossip.key", func(v corev1.Volume) bool { return v.Secret != nil && hasItem(v.Secret, "gossip.key") }},
	} {
		v, ok := volumeAt(s, c, filepath.Dir(f.path))
		if filepath.Base(f.path) != f.base || !ok || !f.from(v) {
			t.Errorf("%s: want %s in a mounted volume that holds it", f.path, f.base)
		}
	}
	return cfg.ShutdownTimeout
}

// podEnv returns the container's environment as the kubelet sets it: field
// references from fields, $(VAR) expanded from earlier variables.
func podEnv(t *testing.T, c corev1.Container, fields map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			v, ok := fields[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				t.Fatalf("env %s: field %s not simulated", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env[e.Name] = v
		case e.ValueFrom != nil:
			t.Fatalf("env %s: only fieldRef is simulated", e.Name)
		default:
			v := e.Value
			for k, val := range env {
				v = strings.ReplaceAll(v, "$("+k+")", val)
			}
			env[e.Name] = v
		}
	}
	return env
}

func hasItem(s *corev1.SecretVolumeSource, key string) bool {
	for _, it := range s.Items {
		if it.Key == key && it.Path == key {
			return true
		}
	}
	return false
}

// volumeAt returns the volume the container mounts at dir.
func volumeAt(s *appsv1.StatefulSet, c corev1.Container, dir string) (corev1.Volume, bool) {
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != dir || !vm.ReadOnly {
			continue
		}
		for _, v := range s.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name {
				return v, true
			}
		}
	}
	return corev1.Volume{}, false
}

// TestCertManagerObjects: every Certificate is signed by an Issuer of the
// manifests; the CA is a CA; a client certificate names a ringlimit client
// and can only authenticate a client.
func TestCertManagerObjects(t *testing.T) {
	t.Parallel()
	m := load(t)
	var ca, clients int
	for _, c := range m.certs {
		if c.Spec.IssuerRef.Kind != "Issuer" || m.issuers[c.Spec.IssuerRef.Name] == nil {
			t.Errorf("Certificate %s: issuer %s %q not in the manifests", c.Name, c.Spec.IssuerRef.Kind, c.Spec.IssuerRef.Name)
		}
		if c.Spec.PrivateKey == nil || c.Spec.PrivateKey.RotationPolicy != cmv1.RotationPolicyAlways {
			t.Errorf("Certificate %s: want privateKey.rotationPolicy Always (a new key at each renewal)", c.Name)
		}
		switch {
		case c.Spec.IsCA:
			ca++
			if iss := m.issuers[c.Spec.IssuerRef.Name]; iss == nil || iss.Spec.SelfSigned == nil {
				t.Errorf("CA Certificate %s: want a self-signed issuer", c.Name)
			}
		default:
			clients++
			if len(c.Spec.URIs) != 1 || !strings.HasPrefix(c.Spec.URIs[0], "ringlimit://client/") {
				t.Errorf("Certificate %s: URIs %v, want one ringlimit://client/<name>", c.Name, c.Spec.URIs)
			}
			if !slices.Contains(c.Spec.Usages, cmv1.UsageClientAuth) || slices.Contains(c.Spec.Usages, cmv1.UsageServerAuth) {
				t.Errorf("Certificate %s: usages %v, want client auth and not server auth", c.Name, c.Spec.Usages)
			}
		}
	}
	if ca != 1 || clients == 0 {
		t.Errorf("Certificates: %d CA, %d client; want 1 and at least 1", ca, clients)
	}
	for name, iss := range m.issuers {
		if iss.Spec.CA != nil {
			found := false
			for _, c := range m.certs {
				found = found || c.Spec.IsCA && c.Spec.SecretName == iss.Spec.CA.SecretName
			}
			if !found {
				t.Errorf("CA Issuer %s: Secret %q is no CA Certificate's", name, iss.Spec.CA.SecretName)
			}
		}
	}
}
