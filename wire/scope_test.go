package wire_test

import (
	"strings"
	"testing"

	"github.com/leafmq/leafmq/wire"
)

// TestScope: no region keeps every name as it was (single-region
// deployments unchanged); a region's names are its own, and none of them
// is matched by a subscription of another scope or of an unscoped subject.
func TestScope(t *testing.T) {
	var none wire.Scope
	for got, want := range map[string]string{
		none.Status():              wire.StatusSubject,
		none.Time():                wire.TimeSubject,
		none.FloorPrefix():         wire.FloorPrefix,
		none.FloorAnnouncePrefix(): wire.FloorAnnouncePrefix,
		none.Floors():              wire.FloorsSubject,
		none.TagChangedPrefix():    wire.TagChangedPrefix,
		none.Members():             wire.MembersBucket,
		none.Bucket("leaf_alloc"):  "leaf_alloc",
	} {
		if got != want {
			t.Errorf("unscoped %q, want %q", got, want)
		}
	}
	east := wire.Scope("east")
	for got, want := range map[string]string{
		east.Status():              "leaf.in.east.admin.status",
		east.Time():                "leaf.in.east.admin.time",
		east.FloorPrefix():         "leaf.in.east.admin.floor.",
		east.FloorAnnouncePrefix(): "leaf.in.east.floor.",
		east.Floors():              "leaf.in.east.admin.floors",
		east.TagChangedPrefix():    "leaf.in.east.admin.changed.",
		east.Members():             "leaf_nodes_east",
		east.Bucket("leaf_alloc"):  "leaf_alloc_east",
		east.Bucket("leaf_mono"):   "leaf_mono_east",
	} {
		if got != want {
			t.Errorf("scoped %q, want %q", got, want)
		}
	}
	// The subscriptions of every scope, and the unscoped ones of the
	// other subjects, against every scope's subjects: a match only
	// within one scope, on the subject meant.
	scopes := []wire.Scope{"", "east", "west", "admin", "segment", "in"}
	subjects := func(s wire.Scope) []string {
		return []string{s.Status(), s.Time(), s.Floors(), s.FloorPrefix() + "t", s.FloorAnnouncePrefix() + "t", s.TagChangedPrefix() + "t"}
	}
	subs := func(s wire.Scope) []string {
		return []string{s.Status(), s.Time(), s.Floors(), s.FloorPrefix() + "*", s.FloorAnnouncePrefix() + "*", s.TagChangedPrefix() + "*"}
	}
	others := []string{wire.SegmentPrefix + "*", wire.MonoPrefix + "*", wire.SnowflakeSubject, wire.SnowflakePrefix + "*",
		wire.RegionPrefix + "*", wire.RegionsSubject, "leaf.pool.*", "leaf.pool.>", wire.TagsSubject, "leaf.admin.tag.*", "leaf.events.>", "leaf.internal.errors.*"}
	for _, a := range scopes {
		for i, sub := range subs(a) {
			for _, b := range scopes {
				for j, subj := range subjects(b) {
					if got, want := match(sub, subj), a == b && i == j; got != want {
						t.Errorf("subscription %q hears %q: %v, want %v", sub, subj, got, want)
					}
				}
			}
		}
		if a == "" {
			continue
		}
		for _, sub := range others {
			for _, subj := range subjects(a) {
				if match(sub, subj) {
					t.Errorf("subscription %q hears the scoped %q", sub, subj)
				}
			}
		}
	}
}

// match is NATS subject matching of a subscription (with * and >).
func match(sub, subj string) bool {
	p, s := strings.Split(sub, "."), strings.Split(subj, ".")
	for i, tok := range p {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(p) == len(s)
}
