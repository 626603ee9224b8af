// Package natsauth turns NATS credential settings into nats.go connect
// options. The daemon leafd and the CLI leafctl share it, so both accept the
// same ways to authenticate:
//
//	--creds FILE                      .creds file: user JWT and nkey seed (operator/JWT mode)
//	--nkey FILE                       nkey user seed (SU...)
//	--user NAME --password-file FILE  user and password (or --password VALUE)
//	--token-file FILE                 token (or --token VALUE)
//	--tls-ca FILE                     CA bundle that verifies the server; implies TLS
//	--tls-cert FILE --tls-key FILE    client certificate for mutual TLS; implies TLS
//
// leafd registers them with the prefix "nats-" (--nats-creds, ...), leafctl
// without one. Each setting's environment variable is LEAF_NATS_ followed by
// its upper-cased name with "-" as "_" (LEAF_NATS_CREDS, LEAF_NATS_TLS_CA),
// whatever the prefix: for leafd that is exactly LEAF_ + its flag name. This
// package does not read the environment; the programs do.
//
// At most one way to authenticate may be set; TLS combines with any of them.
// A URL may still carry user:password@ or token@ itself; nats.go then sends
// the URL's instead of the user, password, token or nkey set here (a .creds
// JWT is sent regardless).
//
// # Secrets
//
// A password or token given as a flag is visible in ps; the -file forms and
// the .creds and nkey files keep them out of it. Secrets never appear in
// errors, in the flag defaults printed by -h, or when a Config is formatted
// with fmt (%v, %+v, %#v, %s) or logged with log/slog: String, GoString and
// LogValue print "xxxxx" instead. A Config held in an unexported field of
// another struct is printed by fmt without calling its methods, so keep it
// in an exported field (or print Redact()).
//
// Options reads the password and token files once. nats.go reads the
// .creds, nkey seed and TLS files again on every connect and reconnect, so
// rotated credentials and certificates take effect without a restart.
//
// Flags binds a Config to a FlagSet; the other methods only read it, so a
// parsed Config may be shared between goroutines.
package natsauth
