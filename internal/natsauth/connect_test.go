package natsauth_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/leafmq/leafmq/internal/natsauth"
	"github.com/leafmq/leafmq/internal/natstest"
)

// Secrets of the connect tests; every error is checked not to contain them.
const (
	password = "pa55-W0rd-secret"
	token    = "t0ken-secret-value"
)

// runServer starts a nats-server without JetStream (not needed here, and
// in operator mode it would want account limits) after applying opt.
func runServer(t testing.TB, opt func(*server.Options)) *server.Server {
	t.Helper()
	return natstest.RunServer(t, func(o *server.Options) {
		o.JetStream = false
		opt(o)
	})
}

// connect builds the options of c and connects to url, once, without
// reconnects; it returns the error of either step and checks that the
// error holds none of the secrets.
func connect(t *testing.T, url string, c natsauth.Config, secrets ...string) error {
	t.Helper()
	opts, err := c.Options()
	if err == nil {
		var nc *nats.Conn
		nc, err = nats.Connect(url, append(opts, nats.NoReconnect(), nats.Timeout(5*time.Second))...)
		if err == nil {
			defer nc.Close()
			err = nc.Flush()
		}
	}
	if err != nil {
		for _, s := range append(secrets, password, token) {
			if strings.Contains(err.Error(), s) {
				t.Errorf("error contains the secret %q: %v", s, err)
			}
		}
	}
	return err
}

// writeFile writes content to name under dir with mode 0600 and returns
// its path.
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConnectUserPassword(t *testing.T) {
	s := runServer(t, func(o *server.Options) { o.Username, o.Password = "leafd", password })
	dir := t.TempDir()
	tests := []struct {
		name string
		cfg  natsauth.Config
		ok   bool
	}{
		{"flag", natsauth.Config{User: "leafd", Password: password}, true},
		{"file", natsauth.Config{User: "leafd", PasswordFile: writeFile(t, dir, "pw", password+"\n")}, true},
		{"file crlf", natsauth.Config{User: "leafd", PasswordFile: writeFile(t, dir, "pw-crlf", password+"\r\n")}, true},
		{"file no newline", natsauth.Config{User: "leafd", PasswordFile: writeFile(t, dir, "pw-bare", password)}, true},
		{"wrong password", natsauth.Config{User: "leafd", Password: password + "-wrong"}, false},
		{"wrong password file", natsauth.Config{User: "leafd", PasswordFile: writeFile(t, dir, "pw-wrong", password+"-wrong\n")}, false},
		{"two newlines", natsauth.Config{User: "leafd", PasswordFile: writeFile(t, dir, "pw-2nl", password+"\n\n")}, false},
		{"wrong user", natsauth.Config{User: "other", Password: password}, false},
		{"nothing", natsauth.Config{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := connect(t, s.ClientURL(), tt.cfg, password+"-wrong")
			checkAuth(t, err, tt.ok)
		})
	}
}

func TestConnectToken(t *testing.T) {
	s := runServer(t, func(o *server.Options) { o.Authorization = token })
	dir := t.TempDir()
	tests := []struct {
		name string
		cfg  natsauth.Config
		ok   bool
	}{
		{"flag", natsauth.Config{Token: token}, true},
		{"file", natsauth.Config{TokenFile: writeFile(t, dir, "tok", token+"\n")}, true},
		{"wrong token", natsauth.Config{Token: token + "-wrong"}, false},
		{"wrong token file", natsauth.Config{TokenFile: writeFile(t, dir, "tok-wrong", token+"-wrong\n")}, false},
		{"nothing", natsauth.Config{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := connect(t, s.ClientURL(), tt.cfg, token+"-wrong")
			checkAuth(t, err, tt.ok)
		})
	}
}

// An empty password or token file is refused before connecting.
func TestEmptySecretFile(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []natsauth.Config{
		{User: "leafd", PasswordFile: writeFile(t, dir, "pw", "\n")},
		{TokenFile: writeFile(t, dir, "tok", "")},
	} {
		_, err := c.Options()
		if !errors.Is(err, natsauth.ErrFile) || !strings.Contains(err.Error(), "is empty") {
			t.Errorf("%v: Options() = %v, want ErrFile ... is empty", c, err)
		}
	}
}

func TestConnectNKey(t *testing.T) {
	user := newKey(t, nkeys.CreateUser)
	other := newKey(t, nkeys.CreateUser)
	s := runServer(t, func(o *server.Options) {
		o.Nkeys = []*server.NkeyUser{{Nkey: publicKey(t, user)}}
	})
	dir := t.TempDir()
	good := writeFile(t, dir, "user.nk", seed(t, user)+"\n")
	bad := writeFile(t, dir, "other.nk", seed(t, other)+"\n")

	checkAuth(t, connect(t, s.ClientURL(), natsauth.Config{NKey: good}, seed(t, user)), true)
	checkAuth(t, connect(t, s.ClientURL(), natsauth.Config{NKey: bad}, seed(t, other)), false)

	// An account seed is no user seed: refused by Options.
	acct := writeFile(t, dir, "acct.nk", seed(t, newKey(t, nkeys.CreateAccount)))
	if _, err := (natsauth.Config{NKey: acct}).Options(); !errors.Is(err, natsauth.ErrFile) {
		t.Errorf("account seed: Options() = %v, want ErrFile", err)
	}
}

// operator is a JWT-mode setup: an operator, a system account and an
// application account, with a helper that issues user .creds files.
type operator struct {
	claims  *jwt.OperatorClaims
	sysPub  string
	account nkeys.KeyPair
	jwts    map[string]string // account public key -> JWT
}

func newOperator(t testing.TB) *operator {
	t.Helper()
	okp := newKey(t, nkeys.CreateOperator)
	op := &operator{jwts: map[string]string{}}
	sys := newKey(t, nkeys.CreateAccount)
	op.sysPub = publicKey(t, sys)
	op.account = newKey(t, nkeys.CreateAccount)
	for _, kp := range []nkeys.KeyPair{sys, op.account} {
		pub := publicKey(t, kp)
		ac := jwt.NewAccountClaims(pub)
		enc, err := ac.Encode(okp)
		if err != nil {
			t.Fatal(err)
		}
		op.jwts[pub] = enc
	}
	oc := jwt.NewOperatorClaims(publicKey(t, okp))
	oc.SystemAccount = op.sysPub
	enc, err := oc.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	if op.claims, err = jwt.DecodeOperatorClaims(enc); err != nil {
		t.Fatal(err)
	}
	return op
}

func (op *operator) configure(o *server.Options) {
	resolver := &server.MemAccResolver{}
	for pub, enc := range op.jwts {
		_ = resolver.Store(pub, enc) // never fails
	}
	o.TrustedOperators = []*jwt.OperatorClaims{op.claims}
	o.AccountResolver = resolver
	o.SystemAccount = op.sysPub
}

// userCreds issues a user of account and returns the .creds file contents
// and the user's seed.
func userCreds(t testing.TB, account nkeys.KeyPair) (creds, userSeed string) {
	t.Helper()
	user := newKey(t, nkeys.CreateUser)
	uc := jwt.NewUserClaims(publicKey(t, user))
	enc, err := uc.Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	userSeed = seed(t, user)
	b, err := jwt.FormatUserConfig(enc, []byte(userSeed))
	if err != nil {
		t.Fatal(err)
	}
	return string(b), userSeed
}

func TestConnectCreds(t *testing.T) {
	op := newOperator(t)
	s := runServer(t, op.configure)
	dir := t.TempDir()

	creds, userSeed := userCreds(t, op.account)
	good := writeFile(t, dir, "user.creds", creds)
	checkAuth(t, connect(t, s.ClientURL(), natsauth.Config{Creds: good}, userSeed), true)

	// A user of an account the operator never signed.
	stranger, strangerSeed := userCreds(t, newKey(t, nkeys.CreateAccount))
	bad := writeFile(t, dir, "stranger.creds", stranger)
	checkAuth(t, connect(t, s.ClientURL(), natsauth.Config{Creds: bad}, strangerSeed), false)

	// The JWT of one user with the seed of another: refused by Options.
	mixed := creds[:strings.Index(creds, "-----BEGIN USER NKEY SEED")] +
		stranger[strings.Index(stranger, "-----BEGIN USER NKEY SEED"):]
	path := writeFile(t, dir, "mixed.creds", mixed)
	err := connect(t, s.ClientURL(), natsauth.Config{Creds: path}, userSeed, strangerSeed)
	if !errors.Is(err, natsauth.ErrFile) || !strings.Contains(err.Error(), "not that of the JWT's user") {
		t.Errorf("mixed creds: %v, want ErrFile: ... not that of the JWT's user", err)
	}

	// A seed file is no .creds file.
	path = writeFile(t, dir, "seed-only.creds", userSeed+"\n")
	if err := connect(t, s.ClientURL(), natsauth.Config{Creds: path}, userSeed); !errors.Is(err, natsauth.ErrFile) {
		t.Errorf("seed as creds: %v, want ErrFile", err)
	}
}

// checkAuth fails t unless err is nil (ok) or an authorization error.
func checkAuth(t *testing.T, err error, ok bool) {
	t.Helper()
	switch {
	case ok && err != nil:
		t.Fatalf("connect: %v", err)
	case !ok && err == nil:
		t.Fatal("connected with wrong credentials")
	case !ok && !errors.Is(err, nats.ErrAuthorization):
		t.Fatalf("connect: %v, want %v", err, nats.ErrAuthorization)
	}
}

func newKey(t testing.TB, create func() (nkeys.KeyPair, error)) nkeys.KeyPair {
	t.Helper()
	kp, err := create()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func publicKey(t testing.TB, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

func seed(t testing.TB, kp nkeys.KeyPair) string {
	t.Helper()
	s, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	return string(s)
}

// pki is a test CA with a server certificate for 127.0.0.1 and a client
// certificate, all written as PEM files.
type pki struct {
	ca, serverCert, serverKey, clientCert, clientKey string
	otherCA                                          string // a CA that signed none of them
}

func newPKI(t testing.TB) pki {
	t.Helper()
	dir := t.TempDir()
	caKey, caCert, caPEM := newCA(t, "natsauth test CA")
	_, _, otherPEM := newCA(t, "natsauth other CA")
	p := pki{
		ca:      writeFile(t, dir, "ca.pem", caPEM),
		otherCA: writeFile(t, dir, "other-ca.pem", otherPEM),
	}
	certPEM, keyPEM := newLeaf(t, caKey, caCert, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	p.serverCert = writeFile(t, dir, "server.pem", certPEM)
	p.serverKey = writeFile(t, dir, "server-key.pem", keyPEM)
	certPEM, keyPEM = newLeaf(t, caKey, caCert, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "leafctl"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	p.clientCert = writeFile(t, dir, "client.pem", certPEM)
	p.clientKey = writeFile(t, dir, "client-key.pem", keyPEM)
	return p
}

// serialNumber returns a random certificate serial number.
func serialNumber(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func newCA(t testing.TB, name string) (*ecdsa.PrivateKey, *x509.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serialNumber(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// newLeaf signs tmpl (subject, SANs, extended key usage) with the CA and
// returns the certificate and key as PEM.
func newLeaf(t testing.TB, caKey *ecdsa.PrivateKey, ca, tmpl *x509.Certificate) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serialNumber(t)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
}

// runTLSServer starts a server that requires TLS with p's server
// certificate and, with verify, a client certificate signed by p's CA.
func runTLSServer(t testing.TB, p pki, verify bool) *server.Server {
	t.Helper()
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
		CertFile: p.serverCert,
		KeyFile:  p.serverKey,
		CaFile:   p.ca,
		Verify:   verify,
	})
	if err != nil {
		t.Fatal(err)
	}
	return runServer(t, func(o *server.Options) {
		o.TLS = true
		o.TLSConfig = tc
		o.TLSVerify = verify
		o.TLSTimeout = 5
	})
}

func TestConnectTLS(t *testing.T) {
	p := newPKI(t)
	s := runTLSServer(t, p, false)
	url := s.ClientURL()

	// nats.go upgrades to TLS when the server asks, but with the system
	// roots it cannot verify the test CA.
	err := connect(t, url, natsauth.Config{})
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("no CA: %v, want x509.UnknownAuthorityError", err)
	}
	if err := connect(t, url, natsauth.Config{TLSCA: p.otherCA}); !errors.As(err, &unknown) {
		t.Errorf("other CA: %v, want x509.UnknownAuthorityError", err)
	}
	if err := connect(t, url, natsauth.Config{TLSCA: p.ca}); err != nil {
		t.Errorf("CA: %v", err)
	}

	// Any TLS setting requires TLS: a server without it is refused.
	plain := runServer(t, func(*server.Options) {})
	if err := connect(t, plain.ClientURL(), natsauth.Config{TLSCA: p.ca}); !errors.Is(err, nats.ErrSecureConnWanted) {
		t.Errorf("plain server: %v, want %v", err, nats.ErrSecureConnWanted)
	}
}

func TestConnectMutualTLS(t *testing.T) {
	p := newPKI(t)
	s := runTLSServer(t, p, true)
	url := s.ClientURL()

	// The server rejects the handshake. The client's TLS 1.3 handshake has
	// completed by then, so the error is either the server's alert
	// ("remote error: tls: certificate required", as text only) or, when
	// the server has hung up first, nats.ErrTLS with a broken pipe.
	err := connect(t, url, natsauth.Config{TLSCA: p.ca})
	if err == nil || !errors.Is(err, nats.ErrTLS) && !strings.Contains(err.Error(), "tls: certificate required") {
		t.Errorf("no client certificate: %v, want a TLS error", err)
	}
	// The server's CA is no client certificate.
	if _, err := (natsauth.Config{TLSCA: p.ca, TLSCert: p.ca, TLSKey: p.clientKey}).Options(); !errors.Is(err, natsauth.ErrFile) {
		t.Errorf("certificate and key mismatch: %v, want ErrFile", err)
	}
	if err := connect(t, url, natsauth.Config{TLSCA: p.ca, TLSCert: p.clientCert, TLSKey: p.clientKey}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
}

// TLS combines with the other ways to authenticate.
func TestConnectTLSAndPassword(t *testing.T) {
	p := newPKI(t)
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: p.serverCert, KeyFile: p.serverKey})
	if err != nil {
		t.Fatal(err)
	}
	s := runServer(t, func(o *server.Options) {
		o.TLS, o.TLSConfig, o.TLSTimeout = true, tc, 5
		o.Username, o.Password = "leafd", password
	})
	checkAuth(t, connect(t, s.ClientURL(), natsauth.Config{TLSCA: p.ca, User: "leafd", Password: password}), true)
	checkAuth(t, connect(t, s.ClientURL(), natsauth.Config{TLSCA: p.ca, User: "leafd", Password: "nope"}), false)
}

// Options sets TLS 1.2 as the minimum and the callbacks that re-read the
// CA and client certificate on every connect.
func TestOptionsTLSConfig(t *testing.T) {
	p := newPKI(t)
	opts, err := natsauth.Config{TLSCA: p.ca, TLSCert: p.clientCert, TLSKey: p.clientKey}.Options()
	if err != nil {
		t.Fatal(err)
	}
	o := nats.GetDefaultOptions()
	for _, f := range opts {
		if err := f(&o); err != nil {
			t.Fatal(err)
		}
	}
	if !o.Secure || o.TLSConfig == nil || o.TLSConfig.MinVersion != tls.VersionTLS12 {
		t.Fatalf("Secure %v, TLSConfig %+v: want Secure and MinVersion TLS 1.2", o.Secure, o.TLSConfig)
	}
	if o.RootCAsCB == nil || o.TLSCertCB == nil {
		t.Fatal("no RootCAs or client certificate callback")
	}
	pool, err := o.RootCAsCB()
	if err != nil || pool == nil {
		t.Fatalf("RootCAsCB() = %v, %v", pool, err)
	}
	cert, err := o.TLSCertCB()
	if err != nil || cert.Leaf == nil || cert.Leaf.Subject.CommonName != "leafctl" {
		t.Fatalf("TLSCertCB() = %v, %v", cert.Leaf, err)
	}
}
