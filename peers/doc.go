// Package peers is a node's view of the other live nodes: its membership
// in wire.MembersBucket, the floors it hears and answers, the status it
// answers while it starts, and the checks against the live nodes that keep
// ids from repeating. It needs a NATS connection, a name, an instance id, a
// clock and a logger, and takes what it answers from the node as plain
// functions (Config.Status, Config.Floor, Floors).
//
// It protects three invariants of the service:
//
//   - two live nodes never share a name (CheckName): every check below
//     tells this process from the others by its instance id, which a
//     second process under the same name would defeat;
//   - a worker id is served only under a fenced claim and above its last
//     time lease (Holder, Lease, Recent);
//   - a range is reserved above every floor any node has seen (HearFloors,
//     Floor, Mode, Announce, HighestFloor, Other).
//
// A check waits for every member's answer, not for a window: each node
// writes its key (acknowledged) before it lists the others, and answers
// from before it writes its key, so of two nodes that start together the
// one that lists second sees the other's key and waits for its answer. A
// member that stays silent is passed over only once its key is older than
// the members' TTL in the server's time, and its key deleted on the
// revision read. A check gathers for a fixed window only where the list
// cannot be trusted to hold every live node: without JetStream (no
// members) or while the bucket is younger than the TTL.
//
// The life of a Set: New; Start (answer the status and the floors, before
// asking anyone); Join (become a member); the checks; HearFloors (once the
// store's incarnation is known); Started (the node's responder answers the
// status from now); StopFloors (before a hand-back); Leave (before the node
// stops answering); Close. A Set is safe for concurrent use once Start
// returned, and no goroutine of it outlives Close.
package peers
