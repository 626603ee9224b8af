package natsauth

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Config is how a program authenticates to NATS. Secrets may come from a
// flag, an environment variable or a file; the file forms keep them out of
// ps. The zero value authenticates with nothing but what the URL carries.
type Config struct {
	Creds        string // .creds file (user JWT + nkey seed): nats.UserCredentials
	NKey         string // file with an nkey user seed (SU...): nats.NkeyOptionFromSeed
	User         string // user name, with Password or PasswordFile
	Password     string // secret; or PasswordFile
	PasswordFile string // file holding the password; one trailing newline is dropped
	Token        string // secret; or TokenFile
	TokenFile    string // file holding the token; one trailing newline is dropped
	TLSCA        string // PEM CA bundle that verifies the server: nats.RootCAs
	TLSCert      string // PEM client certificate for mutual TLS, with TLSKey: nats.ClientCert
	TLSKey       string // PEM private key of TLSCert

	// prefix is the flag name prefix given to Flags, so that errors name
	// the flags as the user typed them.
	prefix string
}

// Redacted replaces a set secret in Redact, String, GoString and LogValue.
const Redacted = "xxxxx"

var (
	// ErrConflict: settings that exclude each other are both set.
	ErrConflict = errors.New("conflicting nats auth settings")
	// ErrMissing: a setting lacks the one it needs (password without user,
	// certificate without key).
	ErrMissing = errors.New("incomplete nats auth settings")
	// ErrFile: a credentials, secret or TLS file cannot be read or parsed.
	ErrFile = errors.New("bad nats auth file")
)

// setting describes one field: its name (flag name without prefix), how to
// reach it, and whether it is a secret or names a file.
type setting struct {
	name    string
	natsEnv string // the nats CLI's variable, read after LEAF_NATS_*: NATS_CREDS, …
	goName  string
	field   func(*Config) *string
	secret  bool
	file    bool
	usage   string // %[1]s is the flag prefix
}

var settings = []setting{
	{name: "creds", natsEnv: "NATS_CREDS", goName: "Creds", field: func(c *Config) *string { return &c.Creds }, file: true,
		usage: "NATS .creds `file` with a user JWT and its nkey seed"},
	{name: "nkey", natsEnv: "NATS_NKEY", goName: "NKey", field: func(c *Config) *string { return &c.NKey }, file: true,
		usage: "`file` with a NATS nkey user seed (SU...)"},
	{name: "user", natsEnv: "NATS_USER", goName: "User", field: func(c *Config) *string { return &c.User },
		usage: "NATS `user` name, with --%[1]spassword-file or --%[1]spassword"},
	{name: "password", natsEnv: "NATS_PASSWORD", goName: "Password", field: func(c *Config) *string { return &c.Password }, secret: true,
		usage: "NATS `password` of --%[1]suser; visible in ps, prefer --%[1]spassword-file"},
	{name: "password-file", goName: "PasswordFile", field: func(c *Config) *string { return &c.PasswordFile }, file: true,
		usage: "`file` holding the password of --%[1]suser (one trailing newline is ignored)"},
	{name: "token", goName: "Token", field: func(c *Config) *string { return &c.Token }, secret: true,
		usage: "NATS auth `token`; visible in ps, prefer --%[1]stoken-file"},
	{name: "token-file", goName: "TokenFile", field: func(c *Config) *string { return &c.TokenFile }, file: true,
		usage: "`file` holding the NATS auth token (one trailing newline is ignored)"},
	{name: "tls-ca", natsEnv: "NATS_CA", goName: "TLSCA", field: func(c *Config) *string { return &c.TLSCA }, file: true,
		usage: "PEM `file` of the CA certificates that verify the NATS server; requires TLS"},
	{name: "tls-cert", natsEnv: "NATS_CERT", goName: "TLSCert", field: func(c *Config) *string { return &c.TLSCert }, file: true,
		usage: "PEM client certificate `file` for mutual TLS, with --%[1]stls-key; requires TLS"},
	{name: "tls-key", natsEnv: "NATS_KEY", goName: "TLSKey", field: func(c *Config) *string { return &c.TLSKey }, file: true,
		usage: "PEM private key `file` of --%[1]stls-cert"},
}

// envName is the environment variable of a setting: LEAF_NATS_CREDS for
// "creds", whatever the flag prefix.
func envName(name string) string {
	return "LEAF_NATS_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// FromEnv sets each setting whose LEAF_NATS_* variable getenv returns
// non-empty (leafctl: call it before parsing the flags, so that flags win).
func (c *Config) FromEnv(getenv func(string) string) {
	for _, s := range settings {
		if v := getenv(envName(s.name)); v != "" {
			*s.field(c) = v
		}
	}
}

// FromNATSEnv is FromEnv for the nats CLI's variables (NATS_CREDS,
// NATS_NKEY, NATS_USER, NATS_PASSWORD, NATS_CA, NATS_CERT, NATS_KEY): each
// sets its setting when that is still empty, so LEAF_NATS_* wins.
func (c *Config) FromNATSEnv(getenv func(string) string) {
	for _, s := range settings {
		if p := s.field(c); s.natsEnv != "" && *p == "" {
			*p = getenv(s.natsEnv)
		}
	}
}

// Flags registers the settings on fs as flags named prefix + setting name
// (leafd: "nats-" gives --nats-creds ... --nats-tls-key; leafctl: ""). The
// current field values are the defaults; set secrets are shown as "xxxxx"
// by -h. Each help text ends with the setting's LEAF_NATS_* variable.
// Flags remembers prefix so that Validate's errors name the flags.
func (c *Config) Flags(fs *flag.FlagSet, prefix string) {
	c.prefix = prefix
	for _, s := range settings {
		usage := s.usage
		if strings.Contains(usage, "%[1]s") {
			usage = fmt.Sprintf(usage, prefix)
		}
		usage += " (" + envName(s.name) + ")"
		p := s.field(c)
		if s.secret {
			fs.Var(&secretValue{p: p}, prefix+s.name, usage)
		} else {
			fs.StringVar(p, prefix+s.name, *p, usage)
		}
	}
}

// secretValue is a flag.Value whose String never returns the secret, so
// that -h does not print it as a default.
type secretValue struct{ p *string }

func (v *secretValue) Set(s string) error { *v.p = s; return nil }

func (v *secretValue) String() string {
	if v == nil || v.p == nil || *v.p == "" {
		return ""
	}
	return Redacted
}

// flag returns the flag name of a setting as the user typed it.
func (c Config) flag(name string) string { return "--" + c.prefix + name }

// Validate checks the settings without connecting: at most one of Creds,
// NKey, User/Password and Token; Password and PasswordFile exclusive, and
// Token and TokenFile; a password needs User; TLSCert and TLSKey together;
// every named file exists and is readable. Errors wrap ErrConflict,
// ErrMissing or ErrFile (all problems found, joined), name the flags, and
// never contain a secret.
func (c Config) Validate() error {
	var errs []error
	if c.Password != "" && c.PasswordFile != "" {
		errs = append(errs, fmt.Errorf("%w: %s and %s exclude each other",
			ErrConflict, c.flag("password"), c.flag("password-file")))
	}
	if c.Token != "" && c.TokenFile != "" {
		errs = append(errs, fmt.Errorf("%w: %s and %s exclude each other",
			ErrConflict, c.flag("token"), c.flag("token-file")))
	}
	if c.User == "" {
		if c.Password != "" {
			errs = append(errs, fmt.Errorf("%w: %s needs %s", ErrMissing, c.flag("password"), c.flag("user")))
		}
		if c.PasswordFile != "" {
			errs = append(errs, fmt.Errorf("%w: %s needs %s", ErrMissing, c.flag("password-file"), c.flag("user")))
		}
	}
	if methods := c.methods(); len(methods) > 1 {
		errs = append(errs, fmt.Errorf("%w: %s: use one way to authenticate: %s, %s, %s or %s",
			ErrConflict, strings.Join(methods, " and "),
			c.flag("creds"), c.flag("nkey"), c.flag("user"), c.flag("token")))
	}
	if c.TLSCert != "" && c.TLSKey == "" {
		errs = append(errs, fmt.Errorf("%w: %s needs %s", ErrMissing, c.flag("tls-cert"), c.flag("tls-key")))
	}
	if c.TLSKey != "" && c.TLSCert == "" {
		errs = append(errs, fmt.Errorf("%w: %s needs %s", ErrMissing, c.flag("tls-key"), c.flag("tls-cert")))
	}
	for _, s := range settings {
		if path := *s.field(&c); s.file && path != "" {
			if err := readable(path); err != nil {
				errs = append(errs, fmt.Errorf("%w: %s: %w", ErrFile, c.flag(s.name), err))
			}
		}
	}
	return errors.Join(errs...)
}

// methods returns the flags of the ways to authenticate that are set: one
// flag per way.
func (c Config) methods() []string {
	var m []string
	if c.Creds != "" {
		m = append(m, c.flag("creds"))
	}
	if c.NKey != "" {
		m = append(m, c.flag("nkey"))
	}
	switch {
	case c.User != "":
		m = append(m, c.flag("user"))
	case c.Password != "":
		m = append(m, c.flag("password"))
	case c.PasswordFile != "":
		m = append(m, c.flag("password-file"))
	}
	switch {
	case c.Token != "":
		m = append(m, c.flag("token"))
	case c.TokenFile != "":
		m = append(m, c.flag("token-file"))
	}
	return m
}

// readable reports whether path is a file this process can open. The error
// (from package os) names the path, never the contents.
func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	return nil
}

// Options validates c and returns the nats.Option list that authenticates
// as configured: nats.UserCredentials, nats.NkeyOptionFromSeed,
// nats.UserInfo or nats.Token. It reads the password or token file now
// (dropping one trailing newline) and checks the .creds file (a user JWT
// and the seed of that user) and the TLS files, so that mistakes show at
// start, not at the first connect. With any TLS setting the options
// require TLS: nats.Secure with MinVersion TLS 1.2, plus nats.RootCAs and
// nats.ClientCert, which re-read their files on every reconnect. An empty
// Config gives no options.
func (c Config) Options() ([]nats.Option, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var opts []nats.Option
	switch {
	case c.Creds != "":
		if err := checkCreds(c.Creds); err != nil {
			return nil, fmt.Errorf("%w: %s %s: %w", ErrFile, c.flag("creds"), c.Creds, err)
		}
		opts = append(opts, nats.UserCredentials(c.Creds))
	case c.NKey != "":
		o, err := nats.NkeyOptionFromSeed(c.NKey)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %s: %w", ErrFile, c.flag("nkey"), c.NKey, err)
		}
		opts = append(opts, o)
	case c.User != "":
		password := c.Password
		if c.PasswordFile != "" {
			var err error
			if password, err = c.readSecret("password-file", c.PasswordFile); err != nil {
				return nil, err
			}
		}
		opts = append(opts, nats.UserInfo(c.User, password))
	case c.Token != "" || c.TokenFile != "":
		token := c.Token
		if c.TokenFile != "" {
			var err error
			if token, err = c.readSecret("token-file", c.TokenFile); err != nil {
				return nil, err
			}
		}
		opts = append(opts, nats.Token(token))
	}
	if c.TLSCA != "" || c.TLSCert != "" {
		tlsOpts, err := c.tlsOptions()
		if err != nil {
			return nil, err
		}
		opts = append(opts, tlsOpts...)
	}
	return opts, nil
}

func (c Config) tlsOptions() ([]nats.Option, error) {
	// Secure first: RootCAs and ClientCert keep the tls.Config it sets and
	// add callbacks that fill in RootCAs and Certificates at each connect.
	opts := []nats.Option{nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12})}
	if c.TLSCA != "" {
		pem, err := os.ReadFile(c.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrFile, c.flag("tls-ca"), err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: %s %s: no PEM certificate found", ErrFile, c.flag("tls-ca"), c.TLSCA)
		}
		opts = append(opts, nats.RootCAs(c.TLSCA))
	}
	if c.TLSCert != "" {
		if _, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey); err != nil {
			return nil, fmt.Errorf("%w: %s %s, %s %s: %w", ErrFile,
				c.flag("tls-cert"), c.TLSCert, c.flag("tls-key"), c.TLSKey, err)
		}
		opts = append(opts, nats.ClientCert(c.TLSCert, c.TLSKey))
	}
	return opts, nil
}

// readSecret reads a password or token file, dropping one trailing newline
// ("\n" or "\r\n"). An empty secret is an error: an unpopulated secret
// mount should not silently mean "no password".
func (c Config) readSecret(name, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrFile, c.flag(name), err)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	if len(b) == 0 {
		return "", fmt.Errorf("%w: %s %s is empty", ErrFile, c.flag(name), path)
	}
	return string(b), nil
}

// checkCreds checks that a .creds file holds a user JWT and the seed of
// that very user. Errors name no part of the file.
func checkCreds(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	defer wipe(b)
	token, err := nkeys.ParseDecoratedJWT(b)
	if err != nil {
		return fmt.Errorf("no user JWT: %w", err)
	}
	claims, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return fmt.Errorf("no user JWT: %w", err)
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return fmt.Errorf("no nkey seed: %w", err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return fmt.Errorf("bad nkey seed: %w", err)
	}
	if pub != claims.Subject {
		return fmt.Errorf("the seed is not that of the JWT's user %s", claims.Subject)
	}
	return nil
}

func wipe(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}

// Redact returns a copy of c with a set Password and Token replaced by
// "xxxxx", for printing configurations.
func (c Config) Redact() Config {
	for _, s := range settings {
		if p := s.field(&c); s.secret && *p != "" {
			*p = Redacted
		}
	}
	return c
}

// String formats the set fields of c with the secrets redacted, like %+v
// would: {User:leafd Password:xxxxx}. It makes %v, %+v and %s safe.
func (c Config) String() string {
	r := c.Redact()
	var parts []string
	for _, s := range settings {
		if v := *s.field(&r); v != "" {
			parts = append(parts, s.goName+":"+v)
		}
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// GoString formats c as Go syntax with the secrets redacted, for %#v:
// natsauth.Config{User:"leafd", Password:"xxxxx"}.
func (c Config) GoString() string {
	r := c.Redact()
	var parts []string
	for _, s := range settings {
		if v := *s.field(&r); v != "" {
			parts = append(parts, s.goName+":"+strconv.Quote(v))
		}
	}
	return "natsauth.Config{" + strings.Join(parts, ", ") + "}"
}

// LogValue implements slog.LogValuer: a group of the set settings, by
// setting name, with the secrets redacted.
func (c Config) LogValue() slog.Value {
	r := c.Redact()
	var attrs []slog.Attr
	for _, s := range settings {
		if v := *s.field(&r); v != "" {
			attrs = append(attrs, slog.String(s.name, v))
		}
	}
	return slog.GroupValue(attrs...)
}

var (
	_ fmt.Stringer   = Config{}
	_ fmt.GoStringer = Config{}
	_ slog.LogValuer = Config{}
	_ flag.Value     = (*secretValue)(nil)
)

// IsZero reports whether no setting is made (the flag prefix aside).
func (c Config) IsZero() bool {
	c.prefix = ""
	return c == Config{}
}

// RedactURL hides the passwords and tokens of comma-separated NATS URLs,
// for logs and error messages.
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			parts[i] = "(unparsable url)"
			continue
		}
		if u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), Redacted)
			} else {
				u.User = url.User(Redacted) // a token
			}
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
