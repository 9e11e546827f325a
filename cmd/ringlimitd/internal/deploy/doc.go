// Package deploy holds the tests of the Kubernetes manifests in
// docs/kubernetes: every object decoded strictly into its Kubernetes type,
// and the properties the docs promise checked on the decoded objects.
package deploy
