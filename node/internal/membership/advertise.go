package membership

import (
	"fmt"
	"net"

	sockaddr "github.com/hashicorp/go-sockaddr"
)

// AdvertiseHost picks the host peers use to reach this node: advertise when
// set, else bind when it is a specific IP, else the machine's private IP. The
// error says that no private IP was found (advertise must then be set).
func AdvertiseHost(advertise, bind string) (string, error) {
	if advertise != "" {
		return advertise, nil
	}
	if ip := net.ParseIP(bind); ip != nil && !ip.IsUnspecified() {
		return bind, nil
	}
	ip, err := sockaddr.GetPrivateIP()
	if err != nil || ip == "" {
		return "", fmt.Errorf("no private IP found to advertise (set it): %v", err)
	}
	return ip, nil
}
