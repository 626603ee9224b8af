package segment_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/leafmq/leafmq/segment"
)

// FuzzCheckTag: a tag is accepted exactly when it is a safe single NATS
// subject token and fits Leaf's biz_tag varchar(128); the rest is
// ErrInvalid, never a panic.
func FuzzCheckTag(f *testing.F) {
	for _, s := range []string{"demo", "a.b", "*", ">", "", "a b", strings.Repeat("x", 129), "ÿ", "a\x00", "order-2_X"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tag string) {
		err := segment.CheckTag(tag)
		valid := segment.ValidTag(tag)
		if (err == nil) != valid {
			t.Fatalf("CheckTag(%q) = %v but ValidTag = %v", tag, err, valid)
		}
		if err != nil {
			if !errors.Is(err, segment.ErrInvalid) {
				t.Fatalf("CheckTag(%q) = %v, not ErrInvalid", tag, err)
			}
			return
		}
		if len(tag) == 0 || len(tag) > 128 || strings.ContainsAny(tag, ".*> \t\r\n") {
			t.Fatalf("accepted %q", tag)
		}
		for _, r := range tag {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
				t.Fatalf("accepted %q with %q", tag, r)
			}
		}
	})
}
