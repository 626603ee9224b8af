package wire_test

import (
	"testing"

	"github.com/leafmq/leafmq/wire"
)

// A subject's Err is what /readyz/<subject> answers: nil when ready, else
// its problems, or "not serving" without any.
func TestSubjectStatusErr(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    wire.SubjectStatus
		want string // "" for nil
	}{
		{name: "ready with warnings", s: wire.SubjectStatus{Serving: true, Ready: true, Problems: []string{"a warning"}}},
		{name: "problems", s: wire.SubjectStatus{Serving: true, Problems: []string{"not connected to NATS", "no ids left"}},
			want: "not connected to NATS; no ids left"},
		{name: "not serving", s: wire.SubjectStatus{}, want: "not serving"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Err()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Err() = %v, want nil", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Fatalf("Err() = %v, want %q", err, tc.want)
			}
		})
	}
}
