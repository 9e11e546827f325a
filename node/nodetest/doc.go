// Package nodetest holds what tests, the CLI's in-process demo and other
// single-machine clusters need to run ringlimit nodes in one process: a fast
// loopback Config (TestConfig) secured by an in-memory CA (TestCA), a Cluster
// started and converged in one call (StartCluster, WaitConverged), and an
// in-memory peer network (MemNet) whose links a test can cut. None of it is
// meant for a deployment: the CA lives in memory and its key is in the Config.
package nodetest
