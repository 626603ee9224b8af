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
// node) as soon as a node of another region answers; nodes of the same
// region answering are normal. Nodes with other ids do not hear the
// question at all, so a check that passes heard only its own region.
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
// (Config.Window, DefaultWindow) plus twice this node's round trip to its
// server, at most 5 s: a question and its answer cross the node's link
// twice. The question is asked twice, at the start and half way through
// the window: a region whose subscription was not yet known across the
// gateway when the first question passed (two regions starting at the
// same moment) hears the second. So the gateway's round trip must fit in
// half the default window, 250 ms: a gateway 60 ms each way takes 120 ms
// (TestRegionIDSlowGateway). A longer window would hold every start back
// for nothing in the common case, one region per id, where no answer
// comes; the running check below catches what a short one missed.
//
// The running check. Two regions started on one id while their gateway was
// cut both pass their start checks. Start therefore checks again every
// Config.Period while the node runs, and reports the first conflict it
// finds through Config.Conflict, once: the node stops serving what depends
// on the region id. A conflict is final for the process: that the other
// region falls silent later may be the partition again, not the other
// region gone, and the ids made meanwhile may already repeat; an operator
// gives one region another id and restarts the nodes. Only the answers of
// nodes that passed their own start check (wire.NodeRegion.Checked) stop a
// running node: a node that starts on a taken id, hears the running region
// and refuses must not stop that region as well.
//
// A Guard is safe for concurrent use; its goroutine ends in Close.
package region
