// Package responder is leafmq's NATS face: a NATS micro service named "leaf"
// whose endpoints answer id requests from the producer's rings and admin
// requests from the segment store. Every node joins the queue group "leaf",
// so NATS spreads requests over the nodes and fails over when one leaves.
//
// Subjects (see package wire for the encodings):
//
//	leaf.segment.<tag>     ids of a tag: empty body = 1, decimal N = N ids
//	leaf.admin.tags        JSON list of every tag row
//	leaf.admin.tag.create  JSON {"tag","step","max_id","description"} -> the row
//	leaf.admin.tag.step    JSON {"tag","step"} -> the row
//	leaf.admin.tag.max     JSON {"tag","max_id"} -> the row (max_id may only grow)
//
// Errors are micro error headers with HTTP-like codes, mapped from the
// engines' sentinel errors by one table (codeOf): 400 for bad input, 404 for
// an unknown tag, 503 when no id can be had now, 500 otherwise.
//
// Small requests are answered on the subscription's own goroutine, which
// costs no hand-off; large batches go to a pool of workers so that one big
// request never holds up the rest. A Responder is safe for concurrent use.
package responder
