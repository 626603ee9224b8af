package buildinfo_test

import (
	"testing"

	"github.com/leafmq/leafmq/internal/buildinfo"
)

func TestValidVersion(t *testing.T) {
	if !buildinfo.ValidVersion(buildinfo.Version) {
		t.Fatalf("the default version %q is not SemVer", buildinfo.Version)
	}
	for _, v := range []string{"1.2.3", "0.0.0-dev", "0.0.0-dev+abc123.dirty", "1.0.0-rc.1+build.5"} {
		if !buildinfo.ValidVersion(v) {
			t.Errorf("%q refused", v)
		}
	}
	for _, v := range []string{"dev", "v1.2.3", "1.2", "1.2.3-", "01.2.3", "0.1.0-dev+", "abc1234"} {
		if buildinfo.ValidVersion(v) {
			t.Errorf("%q taken", v)
		}
	}
}
