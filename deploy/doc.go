// Package deploy holds ufp's Kubernetes manifests (the *.yaml files
// beside it: the ufp-system Namespace and the agent's ServiceAccount,
// its RBAC, the ConfigMap with the agent's, ufpd's and the CNI's
// configuration, and the DaemonSet of ufpd, ufp-agent and the CNI
// installer), embedded so that tests read exactly what an operator
// applies. deploy/README.md and docs/KUBERNETES.md say how to build the
// image and apply them.
//
// Its tests apply every manifest to a real API server (internal/kubetest)
// with a server-side dry run, and prove the dry run refuses broken
// ones. The programs' own tests parse the ConfigMap's files with their
// loaders (cmd/ufp-agent, cmd/ufpd, cmd/ufp-cni: ConfigFile).
package deploy
