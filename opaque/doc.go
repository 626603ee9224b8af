// Package opaque makes the ids of opaque tags: the n-th id of a tag is a
// keyed permutation of n (FF1 of NIST SP 800-38G over AES, package ff1),
// over a domain of a fixed width (53 bits by default, so that JavaScript
// numbers hold every id exactly; up to 63). A permutation is a bijection,
// so distinct sequence numbers give distinct ids, and without the key the
// ids show neither order nor rate: two order numbers do not tell how many
// orders were taken between them.
//
// Why FF1: it is a standard, reviewed format-preserving cipher, so no new
// cryptography is ours; a plain block cipher would give 64- or 128-bit
// values, and a home-made Feistel network or a multiplicative hash would
// be guessable. FF1 with radix 2 over the width's bits is exactly a
// permutation of [0, 2^width); cycle walking takes 0 out, so every id is
// at least 1, as every other leafmq id.
//
// The tweak is the tag's name: one key serves many tags, each with its own
// permutation. The key (16, 24 or 32 bytes, given in hex from a file or an
// environment variable) is never logged or printed; what identifies it is
// its KeyID, a hash that each opaque tag records when it is created, so
// that a node with another key refuses to serve the tag instead of handing
// out ids of another permutation, which could repeat ids already served.
package opaque
