package membership

import "testing"

func TestAdvertiseHostPrefersSetAddresses(t *testing.T) {
	if h, err := AdvertiseHost("10.1.2.3", "0.0.0.0"); err != nil || h != "10.1.2.3" {
		t.Fatalf("advertise set: %q, %v", h, err)
	}
	if h, err := AdvertiseHost("", "127.0.0.1"); err != nil || h != "127.0.0.1" {
		t.Fatalf("a specific bind address: %q, %v", h, err)
	}
}
