package leasetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leafmq/leafmq/mono"
)

// Factory returns a fresh, empty Lease with TTL ttl for one subtest.
type Factory func(t *testing.T, ttl time.Duration) mono.Lease

// Run runs every case on leases made by f. ttl must be short (1-2 s): one
// case waits for an expiry.
func Run(t *testing.T, ttl time.Duration, f Factory) {
	ctx := func(t *testing.T) context.Context {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second+3*ttl)
		t.Cleanup(cancel)
		return c
	}
	t.Run("OneHolder", func(t *testing.T) {
		l, c := f(t, ttl), ctx(t)
		g, err := l.Acquire(c, "t", "a")
		if err != nil {
			t.Fatal(err)
		}
		if g.Tag != "t" || g.Holder != "a" {
			t.Fatalf("grant %+v", g)
		}
		if _, err := l.Acquire(c, "t", "b"); !errors.Is(err, mono.ErrHeld) {
			t.Fatalf("second Acquire = %v, want ErrHeld", err)
		}
		if _, err := l.Acquire(c, "t", "a"); !errors.Is(err, mono.ErrHeld) {
			t.Fatalf("Acquire by the holder again = %v, want ErrHeld (a restarted holder is a new one)", err)
		}
		if h, err := l.Holder(c, "t"); err != nil || h != "a" {
			t.Fatalf("Holder = %q, %v", h, err)
		}
		if _, err := l.Acquire(c, "u", "b"); err != nil {
			t.Fatalf("another tag: %v", err)
		}
	})
	t.Run("RenewFenced", func(t *testing.T) {
		l, c := f(t, ttl), ctx(t)
		g, err := l.Acquire(c, "t", "a")
		if err != nil {
			t.Fatal(err)
		}
		g2, err := l.Renew(c, g)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Renew(c, g); !errors.Is(err, mono.ErrLost) {
			t.Fatalf("Renew of a superseded grant = %v, want ErrLost", err)
		}
		if err := l.Release(c, g); !errors.Is(err, mono.ErrLost) {
			t.Fatalf("Release of a superseded grant = %v, want ErrLost", err)
		}
		if err := l.Release(c, g2); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Renew(c, g2); !errors.Is(err, mono.ErrLost) {
			t.Fatalf("Renew after Release = %v, want ErrLost", err)
		}
		g3, err := l.Acquire(c, "t", "b")
		if err != nil {
			t.Fatalf("Acquire after Release: %v", err)
		}
		if _, err := l.Renew(c, g2); !errors.Is(err, mono.ErrLost) {
			t.Fatalf("Renew of the old holder after a new Acquire = %v, want ErrLost", err)
		}
		if h, _ := l.Holder(c, "t"); h != "b" {
			t.Fatalf("Holder = %q, want b", h)
		}
		_ = g3
	})
	t.Run("Expires", func(t *testing.T) {
		l, c := f(t, ttl), ctx(t)
		g, err := l.Acquire(c, "t", "a")
		if err != nil {
			t.Fatal(err)
		}
		if l.TTL() != ttl {
			t.Fatalf("TTL = %v, want %v", l.TTL(), ttl)
		}
		deadline := time.Now().Add(3*ttl + 5*time.Second)
		for {
			_, err := l.Acquire(c, "t", "b")
			if err == nil {
				break
			}
			if !errors.Is(err, mono.ErrHeld) || time.Now().After(deadline) {
				t.Fatalf("Acquire of an expired lease: %v", err)
			}
			time.Sleep(ttl / 10)
		}
		if _, err := l.Renew(c, g); !errors.Is(err, mono.ErrLost) {
			t.Fatalf("Renew after expiry and a new holder = %v, want ErrLost", err)
		}
	})
}
