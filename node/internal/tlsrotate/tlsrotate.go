// Package tlsrotate turns a member's TLS settings (the TLS fields of
// node.Config) into a rotate.Source, and runs the sweep that closes the peer
// connections whose material is no longer trusted and warns before the
// material expires. It knows rotate, pki and the settings, not the node.
//
// Data flow: at New the node checks the settings (Spec.Validate), opens the
// source (Open: a caller's Source, files that reload when they change, or
// static PEM bytes, each checked to name the member and chain to its CA);
// once the node runs, Run sweeps every interval and whenever the source says
// it changed, until stop is closed.
package tlsrotate

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/transport/pki"
	"github.com/ringlimit/ringlimit/transport/rotate"
)

// ErrInvalidConfig is wrapped by every error of this package about the
// settings; node re-exports it as node.ErrInvalidConfig.
var ErrInvalidConfig = errors.New("node: invalid config")

// ErrInsecure is returned by Validate, wrapped with what is missing, for
// settings with neither the material of secure mode nor Insecure; node
// re-exports it as node.ErrInsecure. It wraps ErrInvalidConfig.
var ErrInsecure = fmt.Errorf("%w: no TLS material and no gossip key, and Insecure is not set", ErrInvalidConfig)

// DefaultExpiryWarning is node.Config.CertExpiryWarning's default: 14 days.
const DefaultExpiryWarning = 14 * 24 * time.Hour

// Spec is where a member's TLS material comes from, as node.Config says
// (see its fields of the same names).
type Spec struct {
	Name                      string // the member: its certificate must name it
	AnyName                   bool   // accept a certificate naming another member (tests)
	Source                    rotate.Source
	CAFile, CertFile, KeyFile string
	CAPEM, CertPEM, KeyPEM    []byte
	Issue                     func(member string) (caPEM, certPEM, keyPEM []byte, err error)
	SecretKeyLen              int // len(Config.SecretKey): the gossip key is part of secure mode
	Insecure                  bool
}

// Validate checks that the spec is either fully secure (CA, certificate,
// key, gossip key, each from one place) or explicitly Insecure, and names
// what is missing (ErrInsecure when nothing is set) or set twice
// (ErrInvalidConfig).
func (s *Spec) Validate() error {
	type item struct {
		name string
		file string
		pem  []byte
	}
	items := []item{
		{"TLSCAFile/TLSCAPEM", s.CAFile, s.CAPEM},
		{"TLSCertFile/TLSCertPEM", s.CertFile, s.CertPEM},
		{"TLSKeyFile/TLSKeyPEM", s.KeyFile, s.KeyPEM},
	}
	if s.Source != nil {
		for i, it := range items {
			if it.file != "" || len(it.pem) > 0 {
				return fmt.Errorf("%w: TLSSource is set together with %s (drop one or the other)", ErrInvalidConfig, it.name)
			}
			items[i].pem = []byte("from TLSSource")
		}
	}
	if s.Issue != nil && !s.Insecure {
		// Open asks Issue for this member's certificate and key.
		for i := range items {
			if items[i].file == "" && len(items[i].pem) == 0 {
				items[i].pem = []byte("from IssueCert")
			}
		}
	}
	var missing, present []string
	for _, it := range items {
		switch {
		case it.file != "" && len(it.pem) > 0:
			return fmt.Errorf("%w: %s: set the file or the PEM bytes, not both", ErrInvalidConfig, it.name)
		case it.file != "" || len(it.pem) > 0:
			present = append(present, it.name)
		default:
			missing = append(missing, it.name)
		}
	}
	if s.SecretKeyLen > 0 {
		present = append(present, "SecretKey")
	} else {
		missing = append(missing, "SecretKey")
	}
	switch {
	case s.Insecure && len(present) > 0 && !(len(present) == 1 && present[0] == "SecretKey"):
		return fmt.Errorf("%w: Insecure is set together with %s (drop one or the other)", ErrInvalidConfig, strings.Join(present, ", "))
	case s.Insecure:
		return nil
	case len(present) == 0:
		return fmt.Errorf("%w: set %s, or set Insecure", ErrInsecure, strings.Join(missing, ", "))
	case len(missing) > 0:
		return fmt.Errorf("%w: secure mode needs %s too (have %s)", ErrInvalidConfig, strings.Join(missing, ", "), strings.Join(present, ", "))
	}
	return nil
}

// Material returns the PEM of the CA, certificate and key: read with read
// from the files, taken from the PEM fields, or issued by Issue for Name.
// Errors wrap ErrInvalidConfig and name the field.
func (s *Spec) Material(read func(string) ([]byte, error)) (ca, cert, key []byte, err error) {
	get := func(field, file string, pemb []byte) ([]byte, error) {
		if file != "" {
			b, err := read(file)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, field, err)
			}
			return b, nil
		}
		return pemb, nil
	}
	if ca, err = get("TLSCAFile", s.CAFile, s.CAPEM); err != nil {
		return nil, nil, nil, err
	}
	if cert, err = get("TLSCertFile", s.CertFile, s.CertPEM); err != nil {
		return nil, nil, nil, err
	}
	if key, err = get("TLSKeyFile", s.KeyFile, s.KeyPEM); err != nil {
		return nil, nil, nil, err
	}
	if s.Issue != nil && !s.Insecure && len(cert) == 0 && len(key) == 0 {
		issuedCA, issuedCert, issuedKey, err := s.Issue(s.Name)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%w: IssueCert for %q: %w", ErrInvalidConfig, s.Name, err)
		}
		cert, key = issuedCert, issuedKey
		if len(ca) == 0 {
			ca = issuedCA
		}
	}
	return ca, cert, key, nil
}

// Open returns the member's TLS source: Source, a rotate.Files over the
// three files (also returned, to be watched and reloaded), or a static
// source of the PEM bytes (or of what Issue gives), reading files with read.
// Every version of the material must name Name (unless AnyName) and chain to
// its own bundle. Errors wrap ErrInvalidConfig.
func (s *Spec) Open(read func(string) ([]byte, error), log *slog.Logger) (rotate.Source, *rotate.Files, error) {
	check := func(m *rotate.Material) error {
		if name, _ := pki.MemberName(m.Cert.Leaf); name != s.Name && !s.AnyName {
			if name == "" {
				return fmt.Errorf("%w: certificate %q is not a node certificate (no %s://%s/ URI or usages)", rotate.ErrInvalid, m.Cert.Leaf.Subject.CommonName, pki.Scheme, pki.MemberHost)
			}
			return fmt.Errorf("%w: TLS certificate names member %q, but Name is %q", rotate.ErrInvalid, name, s.Name)
		}
		return rotate.CheckChain(m)
	}
	switch {
	case s.Source != nil:
		m := s.Source.Material()
		if m == nil || m.Cert == nil || m.Cert.Leaf == nil || m.Roots == nil {
			return nil, nil, fmt.Errorf("%w: TLSSource gave no material (want Cert with Leaf, Roots)", ErrInvalidConfig)
		}
		if err := check(m); err != nil {
			return nil, nil, fmt.Errorf("%w: TLSSource: %w", ErrInvalidConfig, err)
		}
		return s.Source, nil, nil
	case s.CAFile != "" || s.CertFile != "" || s.KeyFile != "":
		if s.CAFile == "" || s.CertFile == "" || s.KeyFile == "" {
			return nil, nil, fmt.Errorf("%w: TLSCAFile, TLSCertFile and TLSKeyFile go together (mixing files and PEM fields does not rotate)", ErrInvalidConfig)
		}
		f, err := rotate.NewFiles(rotate.FilesConfig{CAFile: s.CAFile, CertFile: s.CertFile, KeyFile: s.KeyFile,
			Check: check, Logger: log.With("component", "tls")})
		if err != nil {
			return nil, nil, fmt.Errorf("%w: TLS: %w", ErrInvalidConfig, err)
		}
		return f, f, nil
	}
	caPEM, certPEM, keyPEM, err := s.Material(read)
	if err != nil {
		return nil, nil, err
	}
	m, err := rotate.NewMaterial(caPEM, certPEM, keyPEM)
	if err == nil {
		err = check(m)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: TLS: %w", ErrInvalidConfig, err)
	}
	return rotate.Static{M: m}, nil, nil
}

// Sweeper closes the tracked peer connections whose material is no longer
// trusted and warns before the material expires. Sweep is called by Run's
// goroutine only (or by a test, alone).
type Sweeper struct {
	Src     rotate.Source
	Tracker *rotate.Tracker
	// Warn is how long before expiry to WARN (0: DefaultExpiryWarning;
	// negative: never).
	Warn   time.Duration
	Log    *slog.Logger
	warned time.Time // when the expiry WARN was last logged
}

// Sweep closes the tracked connections whose material is no longer trusted
// at now, and logs a WARN (at most once an hour) when the material expires
// within Warn and is past the first half of its lifetime.
func (s *Sweeper) Sweep(now time.Time) {
	m := s.Src.Material()
	if closed := s.Tracker.Sweep(m, now); closed > 0 {
		s.Log.Info("closed peer connections whose TLS material is no longer trusted; their members reconnect", "closed", closed)
	}
	warn := s.Warn
	if warn == 0 {
		warn = DefaultExpiryWarning
	}
	// A certificate in the first half of its life is not renewed late
	// (short-lived ones, such as the tests', live less than the warning).
	left, life := m.NotAfter().Sub(now), m.NotAfter().Sub(m.NotBefore())
	if warn > 0 && left < warn && left < life/2 && now.After(s.warned.Add(time.Hour)) {
		s.warned = now
		s.Log.Warn("TLS material expires soon: renew the certificate or the CA", "not_after", m.NotAfter(), "left", left.Round(time.Second).String(),
			"certificate", m.Cert.Leaf.Subject.CommonName)
	}
}

// Run sweeps at once, then every interval (0: rotate.DefaultSweepInterval),
// and again once the tracker's Grace has passed after each change the source
// announces (a rotate.Notifier), on a goroutine counted in wg, until stop is
// closed. At each announced change it first calls retire (may be nil), which
// should retire this member's own dialled connections.
func (s *Sweeper) Run(interval time.Duration, stop <-chan struct{}, wg *sync.WaitGroup, retire func()) {
	if interval == 0 {
		interval = rotate.DefaultSweepInterval
	}
	kick := make(chan struct{}, 1)
	if nt, ok := s.Src.(rotate.Notifier); ok {
		nt.OnChange(func() {
			select {
			case kick <- struct{}{}:
			default:
			}
		})
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		again := time.NewTimer(time.Hour)
		again.Stop()
		defer again.Stop()
		for {
			s.Sweep(time.Now())
			select {
			case <-stop:
				return
			case <-t.C:
			case <-again.C:
			case <-kick:
				// After a change, one more sweep once the grace has passed.
				again.Reset(s.Tracker.Grace + 10*time.Millisecond)
				// New material: dial every peer again with it, letting the
				// old connections finish what they carry.
				if retire != nil {
					retire()
				}
			}
		}
	}()
}
