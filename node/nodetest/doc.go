// Package nodetest holds what tests, the CLI's in-process demo and other
// single-machine clusters need to run ringlimit nodes in one process: a fast
// loopback Config (TestConfig) secured by an in-memory CA (TestCA), and a
// Cluster started and converged in one call (StartCluster, WaitConverged).
// Its subpackage memnet is the in-memory peer network whose links a test can
// cut, misroute and count; it speaks transport's types only, so that node's
// own tests can use it. None of it is meant for a deployment: the CA lives
// in memory and its key is in the Config.
package nodetest
