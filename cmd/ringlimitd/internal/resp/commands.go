package resp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/redcon"

	"github.com/ringlimit/ringlimit/algo"
	"github.com/ringlimit/ringlimit/cmd/internal/duration"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/policy"
)

// MaxKeyLen is the longest key accepted by default, in bytes
// (algo.DefaultMaxKeyLen); the node checks the key, with the same rule and
// message on every front door.
const MaxKeyLen = algo.DefaultMaxKeyLen

// clUsage is redis-cell v0.5's arity error, wrapped as its harness wraps every
// error ("Cell error: " around the CellError, whose generic Display adds
// "Store error: "): src/lib.rs, src/redis/mod.rs, src/error.rs.
const clUsage = "Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"

// cellErr wraps msg as redis-cell wraps a generic error.
func cellErr(msg string) string { return "Cell error: Store error: " + msg }

// parseCheck parses CL.THROTTLE or RL.CHECK. It returns the error reply text
// when the command is invalid.
func parseCheck(cmd redcon.Command) (check, string) {
	switch lower(cmd.Args[0]) {
	case "rl.check":
		return parseRLCheck(cmd.Args)
	case "rl.policy":
		return parseRLPolicy(cmd.Args)
	}
	return parseCLThrottle(cmd.Args)
}

// parseCLThrottle follows redis-cell v0.5: 4 or 5 arguments after the name,
// each integer parsed as i64 in order max_burst, count, period, quantity
// ("Couldn't parse as integer: <arg>"), then a zero count or period is "Zero
// rates are not supported". Where redis-cell lets a value through that has no
// meaning (a negative burst, count, period or quantity, a period that overflows
// int64 ns), ringlimit answers an error in the same wrapping naming the
// argument, its value and what is allowed, instead of a meaningless reply.
func parseCLThrottle(args [][]byte) (check, string) {
	if len(args) != 5 && len(args) != 6 {
		return check{}, clUsage
	}
	var v [4]int64
	v[3] = 1
	for i, a := range args[2:] {
		n, err := strconv.ParseInt(string(a), 10, 64)
		if err != nil {
			return check{}, cellErr("Couldn't parse as integer: " + string(a))
		}
		v[i] = n
	}
	if v[1] == 0 || v[2] == 0 {
		return check{}, cellErr("Zero rates are not supported")
	}
	l, hits, err := algo.CLThrottle(v[0], v[1], v[2], v[3])
	if err != nil {
		return check{}, cellErr(node.Message(err))
	}
	return check{key: string(args[1]), limit: l, hits: hits}, ""
}

// rlUsage is RL.CHECK's arity error.
const rlUsage = "ERR Usage: rl.check <key> <algorithm> <limit> <period> [<burst> [<hits>]] [MAXWAIT <max_wait>]"

// parseRLCheck parses
//
//	RL.CHECK <key> <algorithm> <limit> <period> [<burst> [<hits>]] [MAXWAIT <max_wait>]
//
// algorithm is one of algo.Kinds' names; period is a Go duration ("1m",
// "250ms") or an integer number of milliseconds; burst defaults to 0, hits to 1.
// MAXWAIT (any case) waits up to max_wait (a duration or an integer of ms,
// gcra and token_bucket only) for the hits' slot instead of answering
// limited: the reply comes when the slot is due (node.Check.MaxWait).
func parseRLCheck(args [][]byte) (check, string) {
	var maxWait time.Duration
	if n := len(args); n >= 7 && lower(args[n-2]) == "maxwait" {
		w := string(args[n-1])
		if ms, err := strconv.ParseInt(w, 10, 64); err == nil {
			if ms < 0 || ms > int64(node.MaxWait/time.Millisecond) {
				return check{}, fmt.Sprintf("ERR max_wait %d ms: want 0..%d ms", ms, int64(node.MaxWait/time.Millisecond))
			}
			maxWait = time.Duration(ms) * time.Millisecond
		} else if maxWait, err = duration.Parse(w); err != nil {
			return check{}, fmt.Sprintf("ERR max_wait %q: want a duration such as 2s or 250ms, or an integer of ms", w)
		}
		args = args[:n-2]
	}
	if len(args) < 5 || len(args) > 7 {
		return check{}, rlUsage
	}
	kind, err := algo.ParseKind(string(args[2]))
	if err != nil {
		return check{}, "ERR " + node.Message(err)
	}
	limit, err := strconv.ParseInt(string(args[3]), 10, 64)
	if err != nil {
		return check{}, "ERR limit " + strconv.Quote(string(args[3])) + ": not an integer"
	}
	period, msg := parsePeriod(string(args[4]))
	if msg != "" {
		return check{}, "ERR " + msg
	}
	var burst int64
	hits := int64(1)
	if len(args) > 5 {
		if burst, err = strconv.ParseInt(string(args[5]), 10, 64); err != nil {
			return check{}, "ERR burst " + strconv.Quote(string(args[5])) + ": not an integer"
		}
	}
	if len(args) > 6 {
		if hits, err = strconv.ParseInt(string(args[6]), 10, 64); err != nil {
			return check{}, "ERR hits " + strconv.Quote(string(args[6])) + ": not an integer"
		}
	}
	// The node validates the limit, hits and key (node.Check.Validate).
	l := algo.Limit{Kind: kind, Limit: limit, Period: period, Burst: burst}
	return check{key: string(args[1]), limit: l, hits: hits, ms: true, maxWait: maxWait}, ""
}

// rlPolicyUsage is RL.POLICY's arity error.
const rlPolicyUsage = "ERR Usage: rl.policy <domain> <hits> <key> <value> [<key> <value> ...]"

// parseRLPolicy parses
//
//	RL.POLICY <domain> <hits> <key> <value> [<key> <value> ...]
//
// one descriptor (its entries in order) checked against the policy file. An
// empty value is a key-only entry.
func parseRLPolicy(args [][]byte) (check, string) {
	if len(args) < 5 || len(args)%2 == 0 {
		return check{}, rlPolicyUsage
	}
	hits, err := strconv.ParseInt(string(args[2]), 10, 64)
	if err != nil {
		return check{}, "ERR hits " + strconv.Quote(string(args[2])) + ": not an integer"
	}
	d := &policy.Descriptor{}
	for i := 3; i+1 < len(args); i += 2 {
		d.Entries = append(d.Entries, policy.Entry{Key: string(args[i]), Value: string(args[i+1])})
	}
	domain := string(args[1])
	return check{key: policy.Key(domain, d.Entries), hits: hits, domain: domain, desc: d}, ""
}

// parsePeriod reads a Go duration or an integer of milliseconds.
func parsePeriod(s string) (time.Duration, string) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n <= 0 || n > int64(algo.MaxDuration/time.Millisecond) {
			return 0, fmt.Sprintf("period %d ms: want 1..%d ms", n, int64(algo.MaxDuration/time.Millisecond))
		}
		return time.Duration(n) * time.Millisecond, ""
	}
	d, err := duration.Parse(s)
	switch {
	case errors.Is(err, duration.ErrOverflow):
		return 0, fmt.Sprintf("period %q: above the maximum %v", s, duration.Max)
	case err != nil:
		return 0, fmt.Sprintf("period %q: want a duration such as 1m or 250ms, or an integer of ms", s)
	}
	return d, ""
}

// msReply is RL.CHECK's reply: [limited (0/1), limit, remaining,
// retry_after_ms (-1 when allowed or never), reset_after_ms], durations rounded
// up to whole milliseconds.
func msReply(d algo.Decision) [5]int64 {
	ceilMS := func(x time.Duration) int64 { return int64((x + time.Millisecond - 1) / time.Millisecond) }
	r := [5]int64{0, d.Limit, d.Remaining, -1, ceilMS(d.ResetAfter)}
	if !d.Allowed {
		r[0] = 1
		if d.RetryAfter >= 0 {
			r[3] = ceilMS(d.RetryAfter)
		}
	}
	return r
}

// exec answers a command that is not a check (or a check before AUTH).
func (s *Server) exec(st *connState, cmd redcon.Command) reply {
	name := lower(cmd.Args[0])
	args := cmd.Args[1:]
	if !st.authed {
		switch name {
		case "auth", "hello", "quit":
		default:
			return errReply("NOAUTH Authentication required.")
		}
	}
	switch name {
	case "ping":
		switch len(args) {
		case 0:
			return statusReply("PONG")
		case 1:
			return bulkReply(args[0])
		}
		return arityErr(name)
	case "echo":
		if len(args) != 1 {
			return arityErr(name)
		}
		return bulkReply(args[0])
	case "quit":
		return statusReply("OK")
	case "auth":
		switch len(args) {
		case 1:
			return s.auth(st, "default", string(args[0]))
		case 2:
			return s.auth(st, string(args[0]), string(args[1]))
		}
		return arityErr(name)
	case "hello":
		return s.hello(st, args)
	case "select":
		if len(args) != 1 {
			return arityErr(name)
		}
		if n, err := strconv.Atoi(string(args[0])); err != nil || n != 0 {
			if err != nil {
				return errReply("ERR value is not an integer or out of range")
			}
			return errReply("ERR DB index is out of range")
		}
		return statusReply("OK")
	case "client":
		return s.client(st, args)
	case "command":
		return s.command(args)
	case "info":
		return s.info()
	case "del":
		if s.cfg.Keys != nil {
			return s.del(st, args)
		}
	case "cl.throttle", "rl.check", "rl.policy":
		// Only reached before AUTH, which returned NOAUTH above.
		return errReply("NOAUTH Authentication required.")
	}
	return errReply(unknownCommand(cmd.Args))
}

// del answers DEL key [key ...] (Config.Keys).
func (s *Server) del(st *connState, args [][]byte) reply {
	if len(args) == 0 {
		return arityErr("del")
	}
	ctx, cancel := context.WithTimeout(s.callerContext(st), s.cfg.CheckTimeout)
	defer cancel()
	if s.cfg.Admin != nil {
		if err := s.cfg.Admin(ctx); err != nil {
			return errReply("NOPERM " + node.Message(err))
		}
	}
	var n int64
	for _, k := range args {
		found, err := s.cfg.Keys.DeleteKey(ctx, string(k))
		if err != nil && !errors.Is(err, node.ErrInvalidationIncomplete) {
			return errReply("ERR " + node.Message(err))
		}
		if found {
			n++
		}
	}
	return intReply(n)
}

func arityErr(name string) reply {
	return errReply("ERR wrong number of arguments for '" + name + "' command")
}

// unknownCommand is Redis's reply text for a command it does not have.
func unknownCommand(args [][]byte) string {
	var b strings.Builder
	fmt.Fprintf(&b, "ERR unknown command '%s', with args beginning with: ", truncate(args[0]))
	for _, a := range args[1:min(len(args), 4)] {
		fmt.Fprintf(&b, "'%s' ", truncate(a))
	}
	return b.String()
}

func truncate(b []byte) string {
	if len(b) > 128 {
		b = b[:128]
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, string(b))
}

func (s *Server) auth(st *connState, user, password string) reply {
	if s.cfg.Authenticate == nil {
		return errReply("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
	}
	caller, ok := s.cfg.Authenticate(user, password)
	if ok {
		st.authed, st.caller = true, caller
		if st.lc != nil {
			st.lc.authed.Store(true)
		}
	}
	if s.cfg.OnAuth != nil {
		st.hangUp = s.cfg.OnAuth(st.remote, ok)
	}
	if !ok {
		return errReply("WRONGPASS invalid username-password pair or user is disabled.")
	}
	return statusReply("OK")
}

// hello answers HELLO as a Redis limited to RESP2: "HELLO 3" gets NOPROTO so
// clients (go-redis, redis-py) fall back to RESP2; "HELLO" or "HELLO 2" (with
// optional AUTH user pass and SETNAME name) gets the server's properties as a
// flat RESP2 array.
func (s *Server) hello(st *connState, args [][]byte) reply {
	if len(args) > 0 {
		v, err := strconv.Atoi(string(args[0]))
		if err != nil {
			return errReply("ERR Protocol version is not an integer or out of range")
		}
		if v != 2 {
			return errReply("NOPROTO sorry, this protocol version is not supported.")
		}
		for i := 1; i < len(args); i++ {
			switch lower(args[i]) {
			case "auth":
				if i+2 >= len(args) {
					return errReply("ERR Syntax error in HELLO option 'auth'")
				}
				if r := s.auth(st, string(args[i+1]), string(args[i+2])); !st.authed {
					return r
				}
				i += 2
			case "setname":
				if i+1 >= len(args) {
					return errReply("ERR Syntax error in HELLO option 'setname'")
				}
				st.name = string(args[i+1])
				i++
			default:
				return errReply("ERR Syntax error in HELLO option '" + truncate(args[i]) + "'")
			}
		}
	}
	if !st.authed {
		return errReply("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
	}
	id := st.id
	return func(c redcon.Conn) {
		c.WriteArray(14)
		c.WriteBulkString("server")
		c.WriteBulkString("redis")
		c.WriteBulkString("version")
		c.WriteBulkString(redisVersion)
		c.WriteBulkString("proto")
		c.WriteInt(2)
		c.WriteBulkString("id")
		c.WriteInt64(id)
		c.WriteBulkString("mode")
		c.WriteBulkString("standalone")
		c.WriteBulkString("role")
		c.WriteBulkString("master")
		c.WriteBulkString("modules")
		c.WriteArray(0)
	}
}

func (s *Server) client(st *connState, args [][]byte) reply {
	if len(args) == 0 {
		return arityErr("client")
	}
	switch lower(args[0]) {
	case "setname":
		if len(args) != 2 {
			return arityErr("client|setname")
		}
		st.name = string(args[1])
		return statusReply("OK")
	case "getname":
		if st.name == "" {
			return func(c redcon.Conn) { c.WriteNull() }
		}
		return bulkString(st.name)
	case "setinfo":
		if len(args) != 3 {
			return arityErr("client|setinfo")
		}
		return statusReply("OK")
	case "id":
		return intReply(st.id)
	}
	return errReply("ERR unknown subcommand '" + truncate(args[0]) + "'. Try CLIENT HELP.")
}

// commandEntry is one row of COMMAND's reply.
type commandEntry struct {
	name  string
	arity int
	flags []string
	first int
}

// commandTable lists the commands for COMMAND: name, arity (negative = at
// least), flags, first key (= last key = step).
func commandTable() []commandEntry {
	return []commandEntry{
		{"cl.throttle", -5, []string{"write"}, 1},
		{"rl.check", -5, []string{"write"}, 1},
		{"rl.policy", -5, []string{"write"}, 0},
		{"ping", -1, []string{"fast"}, 0},
		{"echo", 2, []string{"fast"}, 0},
		{"quit", -1, []string{"fast"}, 0},
		{"auth", -2, []string{"noscript", "loading", "stale", "fast"}, 0},
		{"hello", -1, []string{"noscript", "loading", "stale", "fast"}, 0},
		{"select", 2, []string{"loading", "stale", "fast"}, 0},
		{"client", -2, []string{"admin", "noscript", "loading", "stale"}, 0},
		{"command", -1, []string{"loading", "stale"}, 0},
		{"info", -1, []string{"loading", "stale"}, 0},
	}
}

// command answers COMMAND (the table), COMMAND COUNT, and COMMAND DOCS (no
// docs: an empty reply, which redis-cli accepts and then offers no hints).
func (s *Server) command(args [][]byte) reply {
	if len(args) > 0 {
		switch lower(args[0]) {
		case "count":
			return intReply(int64(len(commandTable())))
		case "docs":
			return func(c redcon.Conn) { c.WriteArray(0) }
		default:
			return errReply("ERR unknown subcommand '" + truncate(args[0]) + "'. Try COMMAND HELP.")
		}
	}
	table := commandTable()
	return func(c redcon.Conn) {
		c.WriteArray(len(table))
		for _, e := range table {
			c.WriteArray(6)
			c.WriteBulkString(e.name)
			c.WriteInt(e.arity)
			c.WriteArray(len(e.flags))
			for _, f := range e.flags {
				c.WriteString(f)
			}
			c.WriteInt(e.first)
			c.WriteInt(e.first)
			c.WriteInt(e.first)
		}
	}
}

// info answers INFO (any section) with the server section.
func (s *Server) info() reply {
	var b strings.Builder
	b.WriteString("# Server\r\n")
	fmt.Fprintf(&b, "redis_version:%s\r\n", redisVersion)
	fmt.Fprintf(&b, "ringlimit_version:%s\r\n", s.cfg.Version)
	b.WriteString("redis_mode:standalone\r\n")
	b.WriteString("arch_bits:64\r\n")
	fmt.Fprintf(&b, "process_id:%d\r\n", os.Getpid())
	fmt.Fprintf(&b, "tcp_port:%d\r\n", s.port)
	fmt.Fprintf(&b, "uptime_in_seconds:%d\r\n", int64(time.Since(s.start)/time.Second))
	fmt.Fprintf(&b, "connected_clients:%d\r\n", s.Conns())
	return bulkString(b.String())
}
