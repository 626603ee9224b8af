package wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestParseTag(t *testing.T) {
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"simple", "demo", true},
		{"all classes", "Aa0_-z9Z", true},
		{"one", "x", true},
		{"longest", strings.Repeat("a", MaxTagLen), true},
		{"empty", "", false},
		{"too long", strings.Repeat("a", MaxTagLen+1), false},
		{"dot", "a.b", false},
		{"star", "*", false},
		{"gt", ">", false},
		{"space", "a b", false},
		{"slash", "a/b", false},
		{"non-ascii", "caf\u00e9", false},
		{"nul", "a\x00", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTag(tc.in)
			if tc.ok {
				if err != nil || got.String() != tc.in || got.IsZero() {
					t.Fatalf("ParseTag(%q) = %q, %v; want the name back", tc.in, got, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || CodeOf(err) != CodeBadRequest {
				t.Fatalf("ParseTag(%q) error = %v; want one wrapping ErrInvalid (400)", tc.in, err)
			}
			if !got.IsZero() {
				t.Fatalf("ParseTag(%q) = %q with an error; want the zero Tag", tc.in, got)
			}
		})
	}
}

func TestTagZero(t *testing.T) {
	var z Tag
	if !z.IsZero() || z.String() != "" {
		t.Fatalf("zero Tag: IsZero %v, String %q", z.IsZero(), z.String())
	}
	if a, b := MustTag("a"), "a"; a != MustTag(b) || a == MustTag("b") {
		t.Fatal("Tags do not compare by name")
	}
}

func TestMustTagPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("MustTag(\"a.b\") did not panic")
		}
	}()
	MustTag("a.b")
}

func TestTagText(t *testing.T) {
	b, err := json.Marshal(struct{ Tag Tag }{MustTag("demo")})
	if err != nil || string(b) != `{"Tag":"demo"}` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var v struct{ Tag Tag }
	if err := json.Unmarshal(b, &v); err != nil || v.Tag != MustTag("demo") {
		t.Fatalf("Unmarshal = %+v, %v", v, err)
	}
	if err := json.Unmarshal([]byte(`{"Tag":"a.b"}`), &v); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Unmarshal of a bad name = %v, want ErrInvalid", err)
	}
}

// FuzzParseTag: a name is accepted exactly when it is a safe single NATS
// subject token and fits Leaf's biz_tag varchar(128); the rest is
// ErrInvalid, never a panic.
func FuzzParseTag(f *testing.F) {
	for _, s := range []string{"demo", "a.b", "*", ">", "", "a b", strings.Repeat("x", 129), "ÿ", "a\x00", "order-2_X"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tag, err := ParseTag(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || !tag.IsZero() {
				t.Fatalf("ParseTag(%q) = %q, %v; want the zero Tag and ErrInvalid", s, tag, err)
			}
			return
		}
		if tag.String() != s || len(s) == 0 || len(s) > 128 || strings.ContainsAny(s, ".*> \t\r\n") {
			t.Fatalf("accepted %q as %q", s, tag)
		}
		for _, r := range s {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
				t.Fatalf("accepted %q with %q", s, r)
			}
		}
	})
}
