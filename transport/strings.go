package transport

import "strconv"

// String returns "owner", "forwarded", "fallback", "backup", "cached_denial",
// "lease" or "unknown", the
// names used in logs and metrics.
func (r Route) String() string {
	switch r {
	case RouteOwner:
		return "owner"
	case RouteForwarded:
		return "forwarded"
	case RouteFallback:
		return "fallback"
	case RouteBackup:
		return "backup"
	case RouteCachedDenial:
		return "cached_denial"
	case RouteLease:
		return "lease"
	case RouteUnknown:
		return "unknown"
	}
	return "route(" + strconv.Itoa(int(r)) + ")"
}

// String returns "ok", "not_owner", "invalid_argument", "unavailable",
// "permission_denied" or "resource_exhausted".
func (c Code) String() string {
	switch c {
	case CodeOK:
		return "ok"
	case CodeNotOwner:
		return "not_owner"
	case CodeInvalidArgument:
		return "invalid_argument"
	case CodeUnavailable:
		return "unavailable"
	case CodePermissionDenied:
		return "permission_denied"
	case CodeResourceExhausted:
		return "resource_exhausted"
	}
	return "code(" + strconv.Itoa(int(c)) + ")"
}
