package hns

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Kinds of the objects an ObjectError blames, as ufpd's API names them.
const (
	KindEndpoint     = "endpoint"
	KindLoadBalancer = "load balancer"
)

// MaxOwnerLen bounds an Owner (a DNS subdomain's length: the node agent's
// "ufp-agent/NODE" fits).
const MaxOwnerLen = 253

// ObjectError is an error of Lower that one endpoint or load balancer of
// the document is at fault for: the one whose check failed (of two that
// conflict, the one checked later, but for an endpoint address that is a
// load balancer's frontend, which blames the load balancer). It is set
// where the check runs, never read back from the message, so that a
// caller that wrote many objects at once (ufpd's POST /v1/batch) can name
// the one to drop. Error returns Err's message unchanged.
type ObjectError struct {
	Kind string // KindEndpoint, KindLoadBalancer or KindRoute (routes.go)
	Name string // the object's Name ("" if it has none)
	Err  error
}

func (e *ObjectError) Error() string { return e.Err.Error() }
func (e *ObjectError) Unwrap() error { return e.Err }

// Object returns the object as ufpd's API names it: "load balancer web".
func (e *ObjectError) Object() string { return e.Kind + " " + e.Name }

// blame returns err (nil if nil) as an error of the object kind name, or
// as it is if an object is blamed already.
func blame(err error, kind, name string) error {
	var oe *ObjectError
	if err == nil || errors.As(err, &oe) {
		return err
	}
	return &ObjectError{Kind: kind, Name: name, Err: err}
}

// CheckOwner checks an Owner (at is its path for the error): at most
// MaxOwnerLen bytes of printable UTF-8 text. Empty is valid (an object
// made by hand or by the CNI plugin).
func CheckOwner(at, owner string) error {
	if len(owner) > MaxOwnerLen {
		return fmt.Errorf("%s: %d bytes, more than %d", at, len(owner), MaxOwnerLen)
	}
	if !utf8.ValidString(owner) {
		return fmt.Errorf("%s: %q is not UTF-8 text", at, owner)
	}
	for _, r := range owner {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%s: %q has a character that is not printable (%U)", at, owner, r)
		}
	}
	return nil
}
