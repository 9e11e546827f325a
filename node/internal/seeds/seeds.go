// Package seeds turns a node's join addresses (Config.Join) into memberlist
// join addresses: names resolved anew at every attempt, and the seeds that
// are live members already left out.
package seeds

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// NotLive drops the seeds (as Resolve returns them) that are the gossip
// address of a member gossip sees alive, this node's included: a push/pull
// with them merges nothing, and a headless Service's name answers every
// member, so joining them all at every rejoin would cost each node one
// push/pull of the whole member list per member. What is left (members this
// node does not see alive: the other side of a partition, a new pod) is what
// a rejoin is for. A seed without a port is taken at port, memberlist's
// default; a seed whose host is not an IP address is kept.
func NotLive(seeds []string, live map[string]bool, port int) []string {
	var out []string
	for _, s := range seeds {
		hostPort := s
		if i := strings.Index(s, "/"); i >= 0 {
			hostPort = s[i+1:]
		}
		host, p, err := net.SplitHostPort(hostPort)
		if err != nil {
			host, p = strings.Trim(hostPort, "[]"), strconv.Itoa(port)
		}
		if ip := net.ParseIP(host); ip != nil && live[net.JoinHostPort(ip.String(), p)] {
			continue
		}
		out = append(out, s)
	}
	return out
}

// Resolve turns the entries of Config.Join ("host:port", "host", or
// memberlist's "name/host:port") into memberlist join addresses whose host is
// an IP address: an IP literal is kept as given; a name is replaced by each of
// the addresses resolve returns, with the entry's port (or none, so that
// memberlist applies its default, the gossip port) and its "name/" prefix. It
// returns the addresses of every entry that resolved and one error per entry
// that did not.
func Resolve(ctx context.Context, join []string, resolve func(context.Context, string) ([]string, error)) ([]string, []error) {
	var out []string
	var errs []error
	for _, entry := range join {
		prefix, hostPort := "", entry
		if i := strings.Index(entry, "/"); i >= 0 {
			prefix, hostPort = entry[:i+1], entry[i+1:]
		}
		host, port, err := net.SplitHostPort(hostPort)
		if err != nil { // no port: a bare name, IPv4 or IPv6 address
			host, port = strings.Trim(hostPort, "[]"), ""
		}
		if host == "" || net.ParseIP(host) != nil {
			out = append(out, entry) // an IP literal, or memberlist's to refuse
			continue
		}
		addrs, err := resolve(ctx, host)
		if err == nil && len(addrs) == 0 {
			err = errors.New("no address")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("seed %q: %w", entry, err))
			continue
		}
		for _, a := range addrs {
			if net.ParseIP(a) == nil {
				errs = append(errs, fmt.Errorf("seed %q: resolver answered %q, not an IP address", entry, a))
				continue
			}
			if port != "" {
				a = net.JoinHostPort(a, port)
			}
			out = append(out, prefix+a)
		}
	}
	return out, errs
}
