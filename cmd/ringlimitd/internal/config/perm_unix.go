//go:build unix

package config

import (
	"io/fs"
	"os"
	"slices"
	"syscall"
)

// tooOpen reports whether a secret file may be read by others, or by a group
// this process is not in. A group of its own is the Kubernetes case: Secret
// and CSI volumes are mode 0440 (or 0640) owned by the pod's fsGroup, which
// the process runs in, and cannot be chmod-ed on their read-only mount.
func tooOpen(fi fs.FileInfo) bool {
	perm := fi.Mode().Perm()
	if perm&0o007 != 0 {
		return true
	}
	if perm&0o070 == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	gid := int(st.Gid)
	if gid == os.Getegid() {
		return false
	}
	groups, err := os.Getgroups()
	return err != nil || !slices.Contains(groups, gid)
}
