// Package ringlimitv1 is the Go code generated from
// transport/proto/ringlimit/v1/ringlimit.proto (messages, the Limiter and Peer
// service stubs). Do not edit the .pb.go files: change the .proto and run
// `go generate ./transport/...`. Applications use package transport, which maps
// these messages to Go types; the stubs are here for tools and other languages'
// reference.
package ringlimitv1
