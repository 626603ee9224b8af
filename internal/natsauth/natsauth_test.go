package natsauth_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leafmq/leafmq/internal/natsauth"
)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "f", "x")
	missing := filepath.Join(dir, "missing")
	unreadable := writeFile(t, dir, "unreadable", "x")
	if err := os.Chmod(unreadable, 0); err != nil {
		t.Fatal(err)
	}
	canRead := func() bool { f, err := os.Open(unreadable); f.Close(); return err == nil }() // root reads anything

	tests := []struct {
		name  string
		cfg   natsauth.Config
		want  error    // nil: valid
		flags []string // named in the error
	}{
		{"empty", natsauth.Config{}, nil, nil},
		{"creds", natsauth.Config{Creds: file}, nil, nil},
		{"nkey", natsauth.Config{NKey: file}, nil, nil},
		{"user only", natsauth.Config{User: "u"}, nil, nil},
		{"user password", natsauth.Config{User: "u", Password: password}, nil, nil},
		{"user password file", natsauth.Config{User: "u", PasswordFile: file}, nil, nil},
		{"token", natsauth.Config{Token: token}, nil, nil},
		{"token file", natsauth.Config{TokenFile: file}, nil, nil},
		{"tls ca", natsauth.Config{TLSCA: file}, nil, nil},
		{"tls cert key", natsauth.Config{TLSCert: file, TLSKey: file}, nil, nil},
		{"tls with creds", natsauth.Config{Creds: file, TLSCA: file, TLSCert: file, TLSKey: file}, nil, nil},

		{"password and password file", natsauth.Config{User: "u", Password: password, PasswordFile: file},
			natsauth.ErrConflict, []string{"--password", "--password-file"}},
		{"token and token file", natsauth.Config{Token: token, TokenFile: file},
			natsauth.ErrConflict, []string{"--token", "--token-file"}},
		{"password without user", natsauth.Config{Password: password},
			natsauth.ErrMissing, []string{"--password", "--user"}},
		{"password file without user", natsauth.Config{PasswordFile: file},
			natsauth.ErrMissing, []string{"--password-file", "--user"}},
		{"cert without key", natsauth.Config{TLSCert: file},
			natsauth.ErrMissing, []string{"--tls-cert", "--tls-key"}},
		{"key without cert", natsauth.Config{TLSKey: file},
			natsauth.ErrMissing, []string{"--tls-key", "--tls-cert"}},
		{"creds and nkey", natsauth.Config{Creds: file, NKey: file},
			natsauth.ErrConflict, []string{"--creds and --nkey"}},
		{"creds and user", natsauth.Config{Creds: file, User: "u", Password: password},
			natsauth.ErrConflict, []string{"--creds and --user"}},
		{"creds and token", natsauth.Config{Creds: file, Token: token},
			natsauth.ErrConflict, []string{"--creds and --token"}},
		{"nkey and token file", natsauth.Config{NKey: file, TokenFile: file},
			natsauth.ErrConflict, []string{"--nkey and --token-file"}},
		{"user and token", natsauth.Config{User: "u", Token: token},
			natsauth.ErrConflict, []string{"--user and --token"}},
		{"password and token", natsauth.Config{Password: password, Token: token},
			natsauth.ErrConflict, []string{"--password and --token"}},
		{"all four", natsauth.Config{Creds: file, NKey: file, User: "u", Token: token},
			natsauth.ErrConflict, []string{"--creds and --nkey and --user and --token"}},
		{"missing creds", natsauth.Config{Creds: missing},
			natsauth.ErrFile, []string{"--creds", missing}},
		{"missing nkey", natsauth.Config{NKey: missing},
			natsauth.ErrFile, []string{"--nkey", missing}},
		{"missing password file", natsauth.Config{User: "u", PasswordFile: missing},
			natsauth.ErrFile, []string{"--password-file", missing}},
		{"missing token file", natsauth.Config{TokenFile: missing},
			natsauth.ErrFile, []string{"--token-file", missing}},
		{"missing ca", natsauth.Config{TLSCA: missing},
			natsauth.ErrFile, []string{"--tls-ca", missing}},
		{"missing cert", natsauth.Config{TLSCert: missing, TLSKey: file},
			natsauth.ErrFile, []string{"--tls-cert", missing}},
		{"missing key", natsauth.Config{TLSCert: file, TLSKey: missing},
			natsauth.ErrFile, []string{"--tls-key", missing}},
		{"directory", natsauth.Config{Creds: dir},
			natsauth.ErrFile, []string{"--creds", "is a directory"}},
	}
	if !canRead {
		tests = append(tests, struct {
			name  string
			cfg   natsauth.Config
			want  error
			flags []string
		}{"unreadable", natsauth.Config{NKey: unreadable}, natsauth.ErrFile, []string{"--nkey", "permission denied"}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, prefix := range []string{"", "nats-"} {
				c := tt.cfg
				c.Flags(flag.NewFlagSet("test", flag.ContinueOnError), prefix) // names the flags with prefix
				err := c.Validate()
				if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
					t.Fatalf("prefix %q: Validate() = %v, want %v", prefix, err, tt.want)
				}
				if err == nil {
					continue
				}
				for _, f := range tt.flags {
					if strings.HasPrefix(f, "--") {
						f = strings.ReplaceAll(f, "--", "--"+prefix)
					}
					if !strings.Contains(err.Error(), f) {
						t.Errorf("prefix %q: %q does not name %q", prefix, err, f)
					}
				}
				noSecrets(t, err.Error())
				if _, oerr := c.Options(); oerr == nil || oerr.Error() != err.Error() {
					t.Errorf("Options() = %v, want the Validate error", oerr)
				}
			}
		})
	}
}

// Validate reports every problem, not only the first.
func TestValidateAll(t *testing.T) {
	err := natsauth.Config{Password: password, PasswordFile: "/nonexistent/pw", TLSKey: "k"}.Validate()
	for _, want := range []error{natsauth.ErrConflict, natsauth.ErrMissing, natsauth.ErrFile, fs.ErrNotExist} {
		if !errors.Is(err, want) {
			t.Errorf("%v: not %v", err, want)
		}
	}
	noSecrets(t, err.Error())
}

func TestOptionsEmpty(t *testing.T) {
	opts, err := natsauth.Config{}.Options()
	if err != nil || len(opts) != 0 {
		t.Fatalf("Options() = %d options, %v; want none", len(opts), err)
	}
}

// noSecrets fails t if s holds the password or the token.
func noSecrets(t *testing.T, s string) {
	t.Helper()
	for _, secret := range []string{password, token} {
		if strings.Contains(s, secret) {
			t.Errorf("leaks the secret %q: %s", secret, s)
		}
	}
}

func TestRedact(t *testing.T) {
	c := natsauth.Config{User: "u", Password: password, Token: token, TokenFile: "/t"}
	r := c.Redact()
	if r.Password != natsauth.Redacted || r.Token != natsauth.Redacted || r.User != "u" || r.TokenFile != "/t" {
		t.Errorf("Redact() = %#v", r)
	}
	if c.Password != password || c.Token != token {
		t.Error("Redact changed its receiver")
	}
	if r := (natsauth.Config{User: "u"}).Redact(); r.Password != "" || r.Token != "" {
		t.Errorf("Redact() set empty secrets: %#v", r)
	}
}

func TestFormatHidesSecrets(t *testing.T) {
	c := natsauth.Config{User: "leafd", Password: password, Token: token, TLSCA: "/etc/ca.pem"}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("json", "nats", c)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("text", "nats", c, "ptr", &c)
	wrapped := struct{ NATS natsauth.Config }{c}
	outs := map[string]string{
		"String":   c.String(),
		"GoString": c.GoString(),
		"%v":       fmt.Sprintf("%v", c),
		"%+v":      fmt.Sprintf("%+v", c),
		"%#v":      fmt.Sprintf("%#v", c),
		"%s %q":    fmt.Sprintf("%s %q", c, c),
		"ptr %+v":  fmt.Sprintf("%+v", &c),
		"field":    fmt.Sprintf("%+v %#v", wrapped, wrapped),
		"slog":     logs.String(),
	}
	for name, out := range outs {
		noSecrets(t, out)
		if !strings.Contains(out, "leafd") || !strings.Contains(out, "/etc/ca.pem") || !strings.Contains(out, natsauth.Redacted) {
			t.Errorf("%s: %s: want user, CA and %s", name, out, natsauth.Redacted)
		}
	}
	if got, want := c.String(), "{User:leafd Password:xxxxx Token:xxxxx TLSCA:/etc/ca.pem}"; got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
	if got, want := c.GoString(), `natsauth.Config{User:"leafd", Password:"xxxxx", Token:"xxxxx", TLSCA:"/etc/ca.pem"}`; got != want {
		t.Errorf("GoString() = %s, want %s", got, want)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(logs.String(), "\n", 2)[0]), &rec); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(rec["nats"]); got != "map[password:xxxxx tls-ca:/etc/ca.pem token:xxxxx user:leafd]" {
		t.Errorf("slog JSON nats = %s", got)
	}
}

// allArgs sets every setting to a value naming it.
func allArgs(prefix string) []string {
	var args []string
	for _, name := range []string{"creds", "nkey", "user", "password", "password-file",
		"token", "token-file", "tls-ca", "tls-cert", "tls-key"} {
		args = append(args, "--"+prefix+name, "v-"+name)
	}
	return args
}

func TestFlags(t *testing.T) {
	want := natsauth.Config{Creds: "v-creds", NKey: "v-nkey", User: "v-user", Password: "v-password",
		PasswordFile: "v-password-file", Token: "v-token", TokenFile: "v-token-file",
		TLSCA: "v-tls-ca", TLSCert: "v-tls-cert", TLSKey: "v-tls-key"}
	for _, prefix := range []string{"", "nats-"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			var c natsauth.Config
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			c.Flags(fs, prefix)
			if err := fs.Parse(allArgs(prefix)); err != nil {
				t.Fatal(err)
			}
			// GoString, not ==: c remembers its flag prefix.
			if c.GoString() != want.GoString() || c.Password != want.Password || c.Token != want.Token {
				t.Fatalf("parsed %#v (password %q, token %q)", c, c.Password, c.Token)
			}
			n := 0
			fs.VisitAll(func(f *flag.Flag) {
				n++
				if !strings.HasPrefix(f.Name, prefix) {
					t.Errorf("flag %s without prefix %q", f.Name, prefix)
				}
				env := "LEAF_NATS_" + strings.ToUpper(strings.ReplaceAll(strings.TrimPrefix(f.Name, prefix), "-", "_"))
				if !strings.HasSuffix(f.Usage, "("+env+")") {
					t.Errorf("--%s: usage %q does not end with (%s)", f.Name, f.Usage, env)
				}
				if prefix == "nats-" && env != "LEAF_"+strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_")) {
					t.Errorf("--%s: %s is not leafd's variable", f.Name, env)
				}
				if strings.Contains(f.Usage, "--") && !strings.Contains(f.Usage, "--"+prefix) {
					t.Errorf("--%s: usage %q refers to flags without prefix %q", f.Name, f.Usage, prefix)
				}
			})
			if n != 10 {
				t.Errorf("%d flags, want 10", n)
			}
		})
	}
}

// Preset fields are the defaults; the environment can be applied through
// flag.Value.Set the way leafd does; -h never prints a secret.
func TestFlagsDefaults(t *testing.T) {
	c := natsauth.Config{User: "preset-user", Password: password, Token: token}
	fs := flag.NewFlagSet("leafd", flag.ContinueOnError)
	var help bytes.Buffer
	fs.SetOutput(&help)
	c.Flags(fs, "nats-")
	if c.User != "preset-user" || c.Password != password || c.Token != token {
		t.Fatalf("Flags reset preset fields: %#v", c)
	}
	if err := fs.Lookup("nats-token-file").Value.Set("/env/token"); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--nats-password", password + "2"}); err != nil {
		t.Fatal(err)
	}
	if c.TokenFile != "/env/token" || c.Password != password+"2" {
		t.Fatalf("got %#v", c)
	}
	fs.PrintDefaults()
	if !strings.Contains(help.String(), "LEAF_NATS_PASSWORD_FILE") || !strings.Contains(help.String(), `default "preset-user"`) {
		t.Errorf("help:\n%s", help.String())
	}
	noSecrets(t, help.String())
	for _, name := range []string{"nats-password", "nats-token"} {
		noSecrets(t, fs.Lookup(name).Value.String())
	}
	// Errors name the flags with the prefix given to Flags.
	err := c.Validate()
	if !errors.Is(err, natsauth.ErrConflict) || !strings.Contains(err.Error(), "--nats-user and --nats-token:") {
		t.Errorf("Validate() = %v", err)
	}
}

func TestFlagsHelpWithoutPreset(t *testing.T) {
	var c natsauth.Config
	fs := flag.NewFlagSet("leafctl", flag.ContinueOnError)
	var help bytes.Buffer
	fs.SetOutput(&help)
	c.Flags(fs, "")
	fs.PrintDefaults()
	if strings.Contains(help.String(), "default") {
		t.Errorf("help of an empty Config shows defaults:\n%s", help.String())
	}
	if !strings.Contains(help.String(), "-password password") || !strings.Contains(help.String(), "-creds file") {
		t.Errorf("help lacks the argument names:\n%s", help.String())
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://u:pw@h:4222":                  "nats://u:xxxxx@h:4222",
		"nats://tok@h:4222,nats://h2:4222":    "nats://xxxxx@h:4222,nats://h2:4222",
		"nats://127.0.0.1:4222":               "nats://127.0.0.1:4222",
		"nats://u:p%40ss@a:1, nats://u:x@b:2": "nats://u:xxxxx@a:1,nats://u:xxxxx@b:2",
	} {
		if got := natsauth.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// FromEnv reads each setting's LEAF_NATS_* variable; flags parsed after it
// win.
func TestFromEnv(t *testing.T) {
	env := map[string]string{"LEAF_NATS_USER": "env-user", "LEAF_NATS_TOKEN_FILE": "/run/tok", "LEAF_NATS": "nats://x:4222"}
	var c natsauth.Config
	c.FromEnv(func(k string) string { return env[k] })
	if c.User != "env-user" || c.TokenFile != "/run/tok" || c.Password != "" {
		t.Fatalf("from env: %+v", c)
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.Flags(fs, "")
	if err := fs.Parse([]string{"--user", "flag-user"}); err != nil {
		t.Fatal(err)
	}
	if c.User != "flag-user" || c.TokenFile != "/run/tok" {
		t.Fatalf("flags must win over env: %+v", c)
	}
}
