package tlsrotate

import (
	"errors"
	"strings"
	"testing"
)

// Validate accepts a fully secure spec or an explicitly insecure one, and
// names what is missing or set twice otherwise.
func TestValidate(t *testing.T) {
	t.Parallel()
	pem := []byte("x")
	issue := func(string) ([]byte, []byte, []byte, error) { return pem, pem, pem, nil }
	for _, tc := range []struct {
		name string
		s    Spec
		want error  // nil: valid
		text string // in the error
	}{
		{"pem", Spec{CAPEM: pem, CertPEM: pem, KeyPEM: pem, SecretKeyLen: 32}, nil, ""},
		{"files", Spec{CAFile: "ca", CertFile: "c", KeyFile: "k", SecretKeyLen: 16}, nil, ""},
		{"issuer", Spec{Issue: issue, SecretKeyLen: 32}, nil, ""},
		{"insecure", Spec{Insecure: true}, nil, ""},
		{"insecure with gossip key", Spec{Insecure: true, SecretKeyLen: 32}, nil, ""},
		{"nothing", Spec{}, ErrInsecure, "set Insecure"},
		{"no key", Spec{CAPEM: pem, CertPEM: pem, KeyPEM: pem}, ErrInvalidConfig, "needs SecretKey"},
		{"both file and pem", Spec{CAFile: "ca", CAPEM: pem}, ErrInvalidConfig, "not both"},
		{"insecure and pem", Spec{CertPEM: pem, KeyPEM: pem, CAPEM: pem, Insecure: true}, ErrInvalidConfig, "Insecure is set together"},
	} {
		err := tc.s.Validate()
		switch {
		case tc.want == nil && err != nil:
			t.Errorf("%s: got %v, want nil", tc.name, err)
		case tc.want != nil && (!errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text)):
			t.Errorf("%s: got %v, want %v containing %q", tc.name, err, tc.want, tc.text)
		}
	}
	if !errors.Is(ErrInsecure, ErrInvalidConfig) {
		t.Error("ErrInsecure does not wrap ErrInvalidConfig")
	}
}
