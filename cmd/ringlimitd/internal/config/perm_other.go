//go:build !unix

package config

import "io/fs"

// tooOpen reports whether a secret file may be read by group or others.
func tooOpen(fi fs.FileInfo) bool { return fi.Mode().Perm()&0o077 != 0 }
