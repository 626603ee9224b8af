// Package httpapi is leafmq's HTTP face: Meituan Leaf's HTTP API, drop-in,
// plus a readiness probe and a live status page for operators.
//
// Routes (paths from the handler's root):
//
//	/api/segment/get/{key}              one segment id of tag key, as plain decimal text
//	/api/mono/get/{key}                 one id of monotonic tag key (leaf.mono.<key>, from its leader)
//	/api/snowflake/get/{key}            one snowflake id (key is ignored, as in Leaf)
//	/decodeSnowflakeId?snowflakeId=N    Leaf's decode: {"timestamp":"ms(yyyy-MM-dd HH:mm:ss.SSS)","sequenceId":"…","workerId":"…"}
//	GET /readyz                         200 "ready", or 503 and why not
//	GET /                               the status page (embedded HTML/JS/CSS, no CDN)
//	GET /status.json                    what the page polls every second (StatusDoc)
//	GET /cache, GET /db                 Leaf's monitor pages: redirect to the live page
//
// The id routes accept every method Leaf's @RequestMapping does (GET, HEAD,
// POST, PUT, PATCH, DELETE; HEAD takes an id too, like GET) and answer a
// success exactly as Leaf does: HTTP 200 and the id as the whole body.
// Failures are not Leaf's bare HTTP 500: 400 for a malformed key, 404 for
// an unknown tag, 503 (with Retry-After) when no id can be had right now,
// 501 when that kind of id is off on this node, each with one line of text.
// The README's "Migrating from Leaf" section lists every difference from Leaf.
//
// The handler knows nothing of NATS or of a store: Config injects functions
// that take ids and read status, so the node wires its engines (or
// clients of the cluster) in, and tests wire in-process engines.
//
// Mounting on the node's mux, next to /healthz and /metrics:
//
//	h, err := httpapi.New(httpapi.Config{Segment: …, Snowflake: …, Status: …, Ready: …})
//	mux.Handle("/", h)
//
// or under a prefix with http.StripPrefix("/leaf", h) (mux.Handle("/leaf/", …)):
// the page uses relative URLs only.
//
// The handler is safe for concurrent use; it starts no goroutine that
// outlives a request.
//
// Time comes from Config.Clock (an internal/clock.Clock, the real clock by
// default): /status.json's "time" and the age of its cached answer.
package httpapi
