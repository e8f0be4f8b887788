package hns

// CloneEndpoints returns a deep copy of es. The copies' lists share a few
// large arrays, each list's capacity cut to its length: appending to one
// copies it. It costs a few allocations whatever the number of endpoints.
func CloneEndpoints(es []EndpointConfig) []EndpointConfig {
	if es == nil {
		return nil
	}
	nip, npol, nset := 0, 0, 0
	for i := range es {
		nip += len(es[i].IpConfigurations)
		npol += len(es[i].Policies)
		for _, p := range es[i].Policies {
			nset += len(p.Settings)
		}
	}
	out := make([]EndpointConfig, len(es))
	ips := make([]IpConfigConfig, 0, nip)
	pols := make([]PolicyConfig, 0, npol)
	sets := make([]byte, 0, nset)
	for i := range es {
		e := es[i]
		if e.IpConfigurations != nil {
			a := len(ips)
			ips = append(ips, e.IpConfigurations...)
			e.IpConfigurations = ips[a:len(ips):len(ips)]
		}
		if e.Policies != nil {
			a := len(pols)
			for _, p := range e.Policies {
				if p.Settings != nil {
					b := len(sets)
					sets = append(sets, p.Settings...)
					p.Settings = sets[b:len(sets):len(sets)]
				}
				pols = append(pols, p)
			}
			e.Policies = pols[a:len(pols):len(pols)]
		}
		out[i] = e
	}
	return out
}

// CloneLoadBalancers returns a deep copy of lbs, its lists sharing arrays
// as CloneEndpoints's do.
func CloneLoadBalancers(lbs []LoadBalancerConfig) []LoadBalancerConfig {
	if lbs == nil {
		return nil
	}
	nstr, npm := 0, 0
	for i := range lbs {
		nstr += len(lbs[i].HostComputeEndpoints) + len(lbs[i].DrainingEndpoints) + len(lbs[i].FrontendVIPs)
		npm += len(lbs[i].PortMappings)
	}
	out := make([]LoadBalancerConfig, len(lbs))
	strs := make([]string, 0, nstr)
	pms := make([]LoadBalancerPortMappingConfig, 0, npm)
	strings := func(s []string) []string {
		if s == nil {
			return nil
		}
		a := len(strs)
		strs = append(strs, s...)
		return strs[a:len(strs):len(strs)]
	}
	for i := range lbs {
		b := lbs[i]
		b.HostComputeEndpoints = strings(b.HostComputeEndpoints)
		b.DrainingEndpoints = strings(b.DrainingEndpoints)
		b.FrontendVIPs = strings(b.FrontendVIPs)
		if b.PortMappings != nil {
			a := len(pms)
			pms = append(pms, b.PortMappings...)
			b.PortMappings = pms[a:len(pms):len(pms)]
		}
		out[i] = b
	}
	return out
}
