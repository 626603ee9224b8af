// Package region keeps region ids unique across a NATS supercluster.
//
// A region is a NATS cluster of its own; regions are joined by NATS
// gateways. Each node has a region name (by default the name of the NATS
// cluster it is connected to, DefaultName) and a region id, which is part
// of the ids it makes: two regions under one id would make the same ids.
//
// Every node answers wire.RegionPrefix+<its id> (a plain subscription, no
// queue group: every node of every region with that id answers, gateways
// carrying the interest to the other clusters) with its wire.NodeRegion.
// Check asks on an id and refuses (ErrIDTaken, naming the other region and
// node) as soon as a node of another region answers: another region name,
// or the same name on another NATS cluster (a configuration copied to a
// second cluster): a region is one NATS cluster. A node's cluster is its
// home, the one it started on (wire.NodeRegion.Home), kept through a
// failover; two nodes are on two clusters when both their homes and their
// clusters now differ, so that a NATS cluster without a configured name,
// which takes a new random name when a server restarts, does not part its
// own region; a node on a server without a cluster is compared by name
// only. Nodes of the same region answering are normal. Nodes with other
// ids do not hear the question at all, so a check that passes heard only
// its own region.
//
// The count. Every node, with regions or without (Config.Count 0),
// answers wire.RegionsSubject with its region count, and Check asks it in
// the same window: nodes of two counts map local numbers to ids
// differently (4l+2 of N 4 is 2l of N 2), so a node that hears another
// count refuses (ErrRegionsDiffer, naming the other node and both counts).
// Only answers on RegionsSubject are compared: a node of an older version
// answers its id without a count, and is nothing to compare.
//
// The window. Only the absence of another region's answer is waited for:
// a conflict ends the check at its first answer. A pass waits the window
// (Config.Window, StartWindow: 1.5 s) plus twice this node's round trip
// to its server, at most 5 s: a question and its answer cross the node's
// link twice. So a running region behind a gateway of up to about 1.5 s
// round trip is refused at start. The question is asked twice, at the
// start and half way through the window: a region whose subscription was
// not yet known across the gateway when the first question passed (two
// regions starting at the same moment) hears the second, so two regions
// that start at once on one id find each other behind a gateway of up to
// about 375 ms each way (TestRegionIDSlowGateway300: 300 ms). A node
// without regions waits for no check (a lone node serves at once) and
// runs the same one in the background.
//
// Late answers. A Guard receives every answer on one inbox for its life,
// and an answer counts whenever it comes: one that crossed a gateway
// slower than the window, to the start's question or a running one, is
// judged when it comes, as a running check's (TestRegionIDSlowerGateway:
// 1.2 s each way, the newer region stops 2.4 s after its start). So a
// gateway however slow hides a conflict one round trip at most.
//
// The running check. Two regions started on one id while their gateway was
// cut both pass their start checks. Start therefore asks again every
// Config.Period while the node runs. Only the answers of nodes that passed
// their own start check (wire.NodeRegion.Checked) count: a node that
// starts on a taken id, hears the running region and refuses must not
// stop that region. Of a conflict, the older region keeps serving: each
// answer says since when its region serves (wire.NodeRegion.Since: when
// its first node passed its start check; a node that joins a running
// region inherits it), and a node stops, reporting the conflict through
// Config.Conflict once, unless its region is more than Skew (2 s, for the
// hosts' clocks) older than the other's; if neither is, both stop. An
// older node waits for the younger to say it stopped
// (wire.NodeRegion.Stopped), and stops too if it has not 2 periods and
// 5 s after it was first heard (it may not hear the older one): of two
// regions on one id at most one keeps serving (TestRegionIDHealOlderSurvives,
// TestRegionOlderWaitsForTheYounger). A conflict is final for the process
// that stops: that the other region falls silent later may be the
// partition again, not the other region gone, and the ids made meanwhile
// may already repeat; an operator gives one region another id and
// restarts the nodes.
//
// A Guard is safe for concurrent use; its goroutine ends in Close.
package region
