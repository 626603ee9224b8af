package config_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/snowflake"
)

func TestParseRegionsRefused(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"region id out of range", []string{"--regions", "3", "--region-id", "5"}, nil, "--region-id 5 must be 0-2 for --regions 3"},
		{"negative region id", []string{"--regions", "3", "--region-id", "-1"}, nil, "--region-id -1 must be 0-2 for --regions 3"},
		{"region id not a number", []string{"--regions", "3", "--region-id", "eu"}, nil, `--region-id "eu" is not a number`},
		{"regions without region id", []string{"--regions", "3"}, nil, "--regions 3 needs --region-id, this node's region: 0-2"},
		{"region id without regions", []string{"--region-id", "1"}, nil, "--region-id 1 needs --regions N"},
		{"region id 0 without regions", []string{"--region-id", "0"}, nil, "--region-id 0 needs --regions N"},
		{"region id in env without regions", nil, map[string]string{"LEAF_REGION_ID": "2"}, "--region-id 2 needs --regions N"},
		{"region name without regions", []string{"--region", "eu"}, nil, `--region "eu" needs --regions N`},
		{"negative regions", []string{"--regions", "-2", "--region-id", "0"}, nil, "--regions -2 must be 0"},
		{"bad region name", []string{"--regions", "2", "--region-id", "0", "--region", "eu.west"}, nil, `--region "eu.west" must be`},
		{"layout too small", []string{"--regions", "33", "--region-id", "0", "--snowflake-layout", "leaf-dc"}, nil,
			"room for 32 regions, not 33"},
		{"4-part layout too small", []string{"--regions", "5", "--region-id", "0", "--snowflake-layout", "41+2+8+12"}, nil,
			"room for 4 regions, not 5"},
		{"3-part layout too small", []string{"--regions", "1024", "--region-id", "0"}, nil,
			"1024 regions need 10 region bits"},
		{"4-part without regions", []string{"--snowflake-layout", "41+5+5+12"}, nil,
			"add --regions N (how many regions, at most 32) and --region-id R"},
		{"leaf-dc without regions", []string{"--snowflake-layout", "leaf-dc"}, nil, "add --regions N"},
		{"static worker beyond the region", []string{"--regions", "4", "--region-id", "1", "--worker-registry", "static", "--worker-id", "256"}, nil,
			"worker-id 256 must be 0-255 (the worker within region 1)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse(tc.args, env(tc.env), io.Discard)
			if !errors.Is(err, config.ErrConfig) {
				t.Fatalf("err = %v, want ErrConfig", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestParseRegions(t *testing.T) {
	c, err := config.Parse(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Region.On() || c.Region != (config.RegionConfig{}) {
		t.Fatalf("default regions: %+v, on %v", c.Region, c.Region.On())
	}
	l, err := c.Layout()
	if err != nil || l.RegionBits != 0 || l.String() != snowflake.LeafLayout().String() {
		t.Fatalf("default layout %v, %v", l, err)
	}

	// A 3-part layout gives up ceil(log2 N) worker bits to the regions.
	c, err = config.Parse([]string{"--regions", "3", "--region-id", "0", "--region", "eu-west_1"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Region.On() || c.Region.Count != 3 || c.Region.ID != 0 || c.Region.Name != "eu-west_1" {
		t.Fatalf("region = %+v", c.Region)
	}
	l, err = c.Layout()
	if err != nil || l.RegionBits != 2 || l.MaxWorker() != 255 || !strings.HasPrefix(l.String(), "1+41+2+8+12 ") {
		t.Fatalf("layout for 3 regions = %v (%d region bits), %v", l, l.RegionBits, err)
	}

	// The environment, and a layout with region bits of its own.
	c, err = config.Parse(nil, env(map[string]string{"LEAF_REGIONS": "20", "LEAF_REGION_ID": "19", "LEAF_SNOWFLAKE_LAYOUT": "leaf-dc"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Region.ID != 19 || c.Region.Count != 20 {
		t.Fatalf("region = %+v", c.Region)
	}
	if l, err = c.Layout(); err != nil || l.RegionBits != 5 || l.MaxWorker() != 31 {
		t.Fatalf("leaf-dc layout for 20 regions = %v, %v", l, err)
	}

	// One region: no region bits are needed, the name still is one.
	c, err = config.Parse([]string{"--regions", "1", "--region-id", "0"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if l, err = c.Layout(); err != nil || l.RegionBits != 0 {
		t.Fatalf("layout for 1 region = %v, %v", l, err)
	}

	// In code: SetID gives region 0; a zero ID alone is no region id.
	var r config.RegionConfig
	r.Count = 2
	cc := config.Defaults()
	cc.Region = r
	if err := cc.Validate(); err == nil || !strings.Contains(err.Error(), "needs --region-id") {
		t.Fatalf("Validate with regions and no id: %v", err)
	}
	r.SetID(0)
	cc.Region = r
	if err := cc.Validate(); err != nil || cc.Region.ID != 0 {
		t.Fatalf("Validate with SetID(0): %v, id %d", err, cc.Region.ID)
	}
	cc = config.Defaults()
	cc.Region = config.RegionConfig{Count: 4, ID: 3}
	if err := cc.Validate(); err != nil || cc.Region.ID != 3 {
		t.Fatalf("Validate with ID 3: %v, id %d", err, cc.Region.ID)
	}
}

// With --regions a node creates no tag on first use unless told to: a tag
// made at 1 in a region's new store serves ids a deployment turned into
// regions issued before.
func TestRegionsAutoCreateOff(t *testing.T) {
	for _, c := range []struct {
		regions    int
		autoCreate string
		want       bool
	}{
		{0, "", true}, {2, "", false}, {2, "true", true}, {0, "false", false},
	} {
		cfg := config.Defaults()
		cfg.Region.Count = c.regions
		cfg.Store.AutoCreate = c.autoCreate
		if got := cfg.AutoCreates(); got != c.want {
			t.Errorf("--regions %d --auto-create %q: AutoCreates %v, want %v", c.regions, c.autoCreate, got, c.want)
		}
	}
}
