// Command leafctl asks a leafmq cluster for ids, administers its tags and
// measures it.
//
//	leafctl [--nats URL] next TAG [-n N] [--mono]
//	leafctl tag list | create TAG [--step S] [--max-id M] [--desc D] [--mode segment|mono|opaque] | set-step TAG STEP | set-max TAG MAX
//	leafctl tag restart TAG --floor N   (a deleted tag back, never below what was issued)
//	leafctl tag decode TAG ID           (an opaque id's sequence number)
//	leafctl bench [flags]
//
// Each command is a type in a file of its own (commands.go has the table
// that drives the dispatch and leafctl -h); leafctl COMMAND -h prints its
// usage and every flag.
//
// Exit codes: 0 success, 1 the request failed (the server's code and message
// are printed), 2 bad arguments (usage is printed).
package main
