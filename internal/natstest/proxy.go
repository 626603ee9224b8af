package natstest

import (
	"fmt"
	"strings"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxy starts a Toxiproxy proxy on 127.0.0.1 (a kernel-picked port,
// p.Listen) to the NATS server at url, for tests of a slow or broken
// link; it is stopped at clean-up.
func Proxy(t testing.TB, url string) *toxiproxy.Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "nats", "127.0.0.1:0", strings.TrimPrefix(url, "nats://"))
	if err := p.Start(); err != nil {
		t.Fatalf("natstest: proxy to %s: %v", url, err)
	}
	t.Cleanup(p.Stop)
	return p
}

// BothWays adds a toxic of kind with one attribute to both directions of
// p, named kind-upstream and kind-downstream (for RemoveToxic):
// BothWays(t, p, "latency", "latency", 400) delays every byte 0.4 s each
// way, BothWays(t, p, "timeout", "timeout", 0) swallows every byte.
func BothWays(t testing.TB, p *toxiproxy.Proxy, kind, attr string, value int) {
	t.Helper()
	for _, stream := range []string{"upstream", "downstream"} {
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(
			`{"name":"%s-%s","type":%q,"stream":%q,"toxicity":1,"attributes":{%q:%d}}`, kind, stream, kind, stream, attr, value))); err != nil {
			t.Fatalf("natstest: %s toxic: %v", kind, err)
		}
	}
}
