package wire

import "strings"

// Scope is a region's share of the internal subjects and JetStream buckets
// (docs/regions.md): the region's name, or "" for a deployment without
// regions, whose names are the unscoped ones below. Nodes of a region
// ask and answer only their region's subjects and keep their state in
// their region's buckets: gateways join the regions' NATS clusters into
// one subject space and one JetStream, so one name would be one bucket,
// placed in one cluster, and every question would reach every region's
// nodes, whose floors count another region's local numbers.
//
// A scoped subject is leaf.in.<region>.<the rest of the unscoped one>:
// leaf.admin.floor.<tag> becomes leaf.in.<region>.admin.floor.<tag>. No
// subject outside a scope has "in" as its second token (leaf.segment.*,
// leaf.mono.*, leaf.snowflake*, leaf.region.<id>, leaf.pool.*,
// leaf.admin.*, leaf.floor.*, leaf.events.*, leaf.internal.*), so no
// unscoped subscription hears a scoped subject and no scoped one an
// unscoped subject; and a region's name is one token of its own
// (CheckRegion), so no two regions' subjects meet either. A scoped bucket
// is <bucket>_<region>, as the worker registries are
// (leaf_workers_<region>).
//
// Operator-facing subjects stay unscoped: the tag admin subjects
// (TagsSubject, TagCreateSubject, …, answered by the queue group, which
// NATS serves from the caller's own cluster first; a region's nodes
// answer them scoped too, for an operator who names the region),
// StatusSubject as
// leafctl status asks it (every node of every region answers it), the id
// subjects and the region id check (RegionPrefix). The JetStream pool of
// a region is scoped as well (package pool: its stream LEAF_POOL_<region>,
// its subjects leaf.in.<region>.pool.…).
type Scope string

// ScopePrefix begins every scoped subject: ScopePrefix + <region> + ".".
const ScopePrefix = "leaf.in."

// Subject is the scoped form of unscoped, an internal subject of package
// wire (or its prefix) that begins with "leaf.": itself for no region.
func (s Scope) Subject(unscoped string) string {
	if s == "" {
		return unscoped
	}
	return ScopePrefix + string(s) + "." + strings.TrimPrefix(unscoped, "leaf.")
}

// Bucket is the scoped name of a JetStream bucket: itself for no region,
// else bucket_<region>.
func (s Scope) Bucket(bucket string) string {
	if s == "" {
		return bucket
	}
	return bucket + "_" + string(s)
}

// Status is the subject the nodes of the scope ask each other's status on
// (StatusSubject): name checks, worker-id claims, the monotonic balance,
// the slow-node yield. A scoped node answers StatusSubject too, for
// leafctl status.
func (s Scope) Status() string { return s.Subject(StatusSubject) }

// Time is the scope's TimeSubject: a node's clock is compared with its
// region's nodes.
func (s Scope) Time() string { return s.Subject(TimeSubject) }

// FloorPrefix is the scope's FloorPrefix (+ <tag>).
func (s Scope) FloorPrefix() string { return s.Subject(FloorPrefix) }

// FloorAnnouncePrefix is the scope's FloorAnnouncePrefix (+ <tag>).
func (s Scope) FloorAnnouncePrefix() string { return s.Subject(FloorAnnouncePrefix) }

// Floors is the scope's FloorsSubject.
func (s Scope) Floors() string { return s.Subject(FloorsSubject) }

// TagChangedPrefix is the scope's TagChangedPrefix (+ <tag>): a tag
// created or restarted in a region's store is news to that region only.
func (s Scope) TagChangedPrefix() string { return s.Subject(TagChangedPrefix) }

// Members is the scope's MembersBucket.
func (s Scope) Members() string { return s.Bucket(MembersBucket) }
