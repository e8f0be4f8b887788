// Command ufp-agent is the node agent, kube-proxy for ufp: it watches
// the cluster's Services and EndpointSlices and keeps the node's ufpd
// programmed (package agent does the work). docs/KUBERNETES.md is its
// operator's guide.
//
//	ufp-agent --network NETWORK [--config FILE] [--kubeconfig FILE]
//	          [--hostname-override NAME] [--node-ip IP[,IP]] [--cluster-cidr CIDR[,CIDR]]
//	          [--source-vip IP[,IP]] [--enable-dsr] [--ufpd-socket PATH] [--proxy-name NAME]
//	          [--min-sync-period D] [--sync-period D]
//	          [--metrics-bind-address ADDR] [--healthz-bind-address ADDR] [--profiling]
//	          [--log-level LEVEL]
//
// Invalid flags or configuration exit with status 2 and a message
// naming the flag or the field. SIGTERM or SIGINT stops it; ufpd keeps
// what it was given.
package main
