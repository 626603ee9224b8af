package config

import (
	"fmt"
	"strings"

	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/wire"
)

// PoolSubjects parses --pool into the pool subjects of scope s, the
// node's region ("" without regions): a region's nodes fill their
// region's pool only (package pool).
func (c *Config) PoolSubjects(s wire.Scope) ([]string, error) {
	if strings.TrimSpace(c.Pool.Tags) == "" {
		return nil, nil
	}
	var out []string
	seen := map[string]bool{}
	for _, p := range strings.Split(c.Pool.Tags, ",") {
		p = strings.TrimSpace(p)
		var subject string
		switch {
		case p == "snowflake":
			if c.Registry.Kind == RegistryOff {
				return nil, fmt.Errorf("%w: pool snowflake needs snowflake (--worker-registry is off)", ErrConfig)
			}
			subject = pool.SnowflakeSubjectIn(s)
		default:
			if _, err := wire.ParseTag(p); err != nil {
				return nil, fmt.Errorf("%w: pool %q: want tags ([A-Za-z0-9_-]{1,128}) and/or snowflake", ErrConfig, p)
			}
			subject = pool.SegmentSubjectIn(s, p)
		}
		if !seen[subject] {
			seen[subject] = true
			out = append(out, subject)
		}
	}
	return out, nil
}

func (c *Config) validatePool() error {
	if c.Pool.Depth < 1 || c.Pool.Depth > 100_000 {
		return fmt.Errorf("%w: pool-depth %d must be 1-100000", ErrConfig, c.Pool.Depth)
	}
	if c.Pool.Batch < 1 || c.Pool.Batch > c.MaxBatch {
		return fmt.Errorf("%w: pool-batch %d must be 1-%d (max-batch)", ErrConfig, c.Pool.Batch, c.MaxBatch)
	}
	_, err := c.PoolSubjects("")
	return err
}
