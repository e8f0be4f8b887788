package main

import (
	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vswitch"
)

// ACL sets (hns.ACLSetConfig): the node agent's NetworkPolicies of its
// pods, one set per endpoint, owned and written by batches as load
// balancers are (Batch.ACLSets, DeleteACLSets), read with GET
// /v1/aclsets[?owner=] and /v1/aclsets/{name}. A set naming an endpoint
// ufpd does not have is kept and applies once the endpoint comes, so
// that the CNI plugin's endpoints come and go whatever sets name them.
// Sets are few (one per local pod): a batch finds them by a walk, and the
// journal records them by comparing the lists.

var aclSets = collection[api.ACLSet]{
	kind:  hns.KindACLSet,
	of:    func(doc *vswitch.Config) *[]api.ACLSet { return &doc.ACLSets },
	name:  func(s *api.ACLSet) *string { return &s.Name },
	owner: func(s *api.ACLSet) string { return s.Owner },
}

var aclSetKind = batchKind[hns.ACLSetConfig]{
	kind:  hns.KindACLSet,
	name:  func(s *hns.ACLSetConfig) string { return s.Name },
	owner: func(s *hns.ACLSetConfig) string { return s.Owner },
	equal: hns.SameACLSet,
}

func aclSetName(s *hns.ACLSetConfig) string { return s.Name }

// checkBatchACLSets checks the names of the ACL sets batch b writes and
// deletes, and gives those it writes b's owner.
func checkBatchACLSets(b *api.Batch) error {
	err := batchNames(hns.KindACLSet, "aclSets", len(b.ACLSets), func(i int) string { return b.ACLSets[i].Name },
		"deleteACLSets", b.DeleteACLSets)
	if err != nil {
		return err
	}
	for i := range b.ACLSets {
		s := &b.ACLSets[i]
		if err := ownedBy(hns.KindACLSet, s.Name, "aclSets", i, &s.Owner, b.Owner); err != nil {
			return err
		}
	}
	return nil
}

// applyBatchACLSets makes checked batch b's changes of ACL sets to draft
// dr, counting them in res: the running list is not written (merge), so a
// tracked draft may share it.
func applyBatchACLSets(dr *draft, b *api.Batch, res *api.BatchResult) error {
	if len(b.ACLSets)+len(b.DeleteACLSets) == 0 {
		return nil
	}
	sets, err := merge(aclSetKind, batchList[hns.ACLSetConfig]{list: dr.doc.ACLSets}, b.ACLSets, b.DeleteACLSets, b.Owner, res, nil)
	if err != nil {
		return err
	}
	dr.doc.ACLSets = sets
	return nil
}
