// Package ff1 is the FF1 format-preserving cipher of NIST SP 800-38G over
// AES: a keyed permutation of the numeral strings of one length in one
// radix, reviewed and standardised, so it needs no new cryptography of
// ours. leafmq uses it for opaque tags: the n-th id of a tag is the FF1
// encryption of n over a domain of Width bits, unique because a cipher is
// a bijection and without visible order or rate.
//
// Cipher is the general FF1 (any radix 2..65536, big-number arithmetic),
// checked against NIST's examples. Bits is the same function specialised
// to radix 2 and at most 64 bits, on uint64, with the per-tweak part of
// the CBC-MAC computed once: ten AES block encryptions per value. Each is
// tested to equal the other.
package ff1
