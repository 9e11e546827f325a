package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// errNoSeed is returned by joinSeeds when no entry of Config.Join resolved to
// an address this attempt.
var errNoSeed = errors.New("node: no seed address resolved")

// joinSeeds resolves the seeds of Config.Join again (resolveSeeds) and joins
// the addresses found that are not live members already (notLive). memberlist's
// Join would resolve names itself; resolving here instead lets Config.Resolver
// stand in for DNS, and makes sure every attempt, the first at New and each
// rejoin, asks the resolver anew.
func (n *Node) joinSeeds() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Gossip.TCPTimeout)
	defer cancel()
	go func() { // Close cancels a lookup in flight
		select {
		case <-n.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	seeds, errs := resolveSeeds(ctx, n.cfg.Join, n.resolver())
	for _, err := range errs {
		n.log.Debug("seed not resolved", "err", err)
	}
	if len(seeds) == 0 {
		return 0, fmt.Errorf("%w: %w", errNoSeed, errors.Join(errs...))
	}
	// The node's own copy of the members (setMember), not memberlist's
	// Members(): memberlist mutates the *Node values it hands out under its
	// own lock, so reading their Addr here would race with gossip.
	live := make(map[string]bool)
	n.membersMu.Lock()
	for _, m := range n.members {
		live[m.GossipAddr] = true
	}
	n.membersMu.Unlock()
	seeds = notLive(seeds, live, int(n.ml.LocalNode().Port))
	if len(seeds) == 0 {
		return 0, nil // every seed is a live member already: nothing to merge
	}
	return n.ml.Join(seeds)
}

// notLive drops the seeds (as resolveSeeds returns them) that are the gossip
// address of a member gossip sees alive, this node's included: a push/pull
// with them merges nothing, and a headless Service's name answers every
// member, so joining them all at every rejoin would cost each node one
// push/pull of the whole member list per member. What is left (members this
// node does not see alive: the other side of a partition, a new pod) is what
// a rejoin is for. A seed without a port is taken at port, memberlist's
// default; a seed whose host is not an IP address is kept.
func notLive(seeds []string, live map[string]bool, port int) []string {
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

// resolver returns Config.Resolver, or the system resolver when it is nil.
func (n *Node) resolver() func(context.Context, string) ([]string, error) {
	if n.cfg.Resolver != nil {
		return n.cfg.Resolver
	}
	return net.DefaultResolver.LookupHost
}

// resolveSeeds turns the entries of Config.Join ("host:port", "host", or
// memberlist's "name/host:port") into memberlist join addresses whose host is
// an IP address: an IP literal is kept as given; a name is replaced by each of
// the addresses resolve returns, with the entry's port (or none, so that
// memberlist applies its default, the gossip port) and its "name/" prefix. It
// returns the addresses of every entry that resolved and one error per entry
// that did not.
func resolveSeeds(ctx context.Context, join []string, resolve func(context.Context, string) ([]string, error)) ([]string, []error) {
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
