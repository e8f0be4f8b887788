// Package metrics exports a switch's counters to Prometheus.
//
// NewCollector reads vswitch.Switch.Stats and RuleCounters when it is
// collected (on each scrape) and turns them into constant metrics: nothing
// is counted on the packet path for it, and nothing is kept between
// scrapes. Handler serves them, with the Go runtime's and the process's
// metrics, in the Prometheus exposition formats.
//
// The metrics, all prefixed ufp_:
//
//	policy_generation                          gauge    running policy's generation
//	packets_total{path="fast"|"slow"}          counter  packets by pipeline path
//	drops_total{reason}                        counter  whole switch, every reason
//	port_rx_packets_total{port}                counter  frames read from the port's device
//	port_rx_bytes_total{port}                  counter
//	port_tx_packets_total{port}                counter  frames written to the port's device
//	port_tx_bytes_total{port}                  counter
//	port_tx_errors_total{port}                 counter  frames whose write failed
//	port_drops_total{port,reason}              counter  drops of frames that came by the port (non-zero ones)
//	flow_table_flows                           gauge    flows held (one per direction)
//	flow_table_capacity                        gauge    flows the table holds at most
//	flow_table_inserted_total                  counter
//	flow_table_expired_total                   counter
//	flow_table_evictions_total                 counter
//	flow_table_refused_total                   counter
//	nat_pool_ports_in_use{address,protocol}    gauge    ports (ICMP: identifiers) bound
//	nat_pool_ports{address,protocol}           gauge    ports the pool can bind
//	nat_pool_exhausted_total{address}          counter  bindings refused, every port taken
//	rule_hits_total{port,layer,group,rule}     counter  slow-path decisions the rule made
//	rule_packets_total{port,layer,group,rule}  counter  packets of the flows it decided
//	rule_bytes_total{port,layer,group,rule}    counter
//	device_failures_total                      counter  port devices that stopped on an error
//	tx_no_device_total                         counter  frames forwarded to a port with no device
//	icmp_too_big_sent_total                    counter  ICMP fragmentation needed / packet too big sent
//	fragmented_packets_total                   counter  packets over an egress MTU sent as IPv4 fragments
//
// The slow-path rate is rate(ufp_packets_total{path="slow"}[1m]); the rule
// counters start from zero with each policy the switch applies.
package metrics
