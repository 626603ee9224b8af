package config

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
)

// TestZKIdentity: the default ZooKeeper identity is an address of this
// host (the --http host, or the host's first non-loopback address for a
// wildcard), so that two hosts with one configuration get two worker ids;
// a loopback identity is refused when ZooKeeper is not on loopback.
func TestZKIdentity(t *testing.T) {
	host := func(cidrs ...string) func() ([]net.Addr, error) {
		return func() ([]net.Addr, error) {
			var as []net.Addr
			for _, c := range cidrs {
				ip, n, err := net.ParseCIDR(c)
				if err != nil {
					return nil, err
				}
				n.IP = ip
				as = append(as, n)
			}
			return as, nil
		}
	}
	lan := host("127.0.0.1/8", "::1/128", "fe80::1/64", "10.1.2.3/24", "10.9.9.9/24")
	lo := host("127.0.0.1/8", "::1/128")
	for _, tc := range []struct {
		name  string
		addrs func() ([]net.Addr, error)
		args  []string
		want  string // ZKAddr, or a part of the error
		fails bool
	}{
		{"http host", lan, []string{"--http", "127.0.0.2:8080", "--zk", "127.0.0.1:2181"}, "127.0.0.2:8080", false},
		{"http host, other", lan, []string{"--http", "127.0.0.3:8080", "--zk", "127.0.0.1:2181"}, "127.0.0.3:8080", false},
		{"http lan host", lan, []string{"--http", "10.9.9.9:8080", "--zk", "10.0.0.5:2181"}, "10.9.9.9:8080", false},
		{"wildcard", lan, []string{"--http", "0.0.0.0:8080", "--zk", "10.0.0.5:2181"}, "10.1.2.3:8080", false},
		{"empty host", lan, []string{"--http", ":9090", "--zk", "127.0.0.1:2181"}, "10.1.2.3:9090", false},
		{"v6 wildcard", lan, []string{"--http", "[::]:8080", "--zk", "127.0.0.1:2181"}, "10.1.2.3:8080", false},
		{"only loopback, local zk", lo, []string{"--http", "0.0.0.0:8080", "--zk", "localhost:2181"}, "127.0.0.1:8080", false},
		{"only loopback, remote zk", lo, []string{"--http", "0.0.0.0:8080", "--zk", "10.0.0.5:2181"}, "--zk-addr", true},
		{"default http, remote zk", lan, []string{"--zk", "127.0.0.1:2181,10.0.0.5:2181"}, "--zk-addr", true},
		{"explicit loopback, remote zk", lan, []string{"--zk", "10.0.0.5:2181", "--zk-addr", "127.0.0.1:7000"}, "--zk-addr", true},
		{"explicit, remote zk", lan, []string{"--zk", "10.0.0.5:2181", "--zk-addr", "10.0.0.7:7000"}, "10.0.0.7:7000", false},
		{"explicit loopback, local zk", lan, []string{"--zk", "127.0.0.1:2181", "--zk-addr", "127.0.0.1:7000"}, "127.0.0.1:7000", false},
		{"http off", lan, []string{"--http", "off", "--zk", "127.0.0.1:2181"}, "--zk-addr", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := interfaceAddrs
			interfaceAddrs = tc.addrs
			defer func() { interfaceAddrs = old }()
			c, err := Parse(append([]string{"--worker-registry", "zk"}, tc.args...), func(string) string { return "" }, io.Discard)
			if tc.fails {
				if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v (zk-addr %q), want ErrConfig naming %s", err, c.Registry.ZKAddr, tc.want)
				}
				return
			}
			if err != nil || c.Registry.ZKAddr != tc.want {
				t.Fatalf("zk-addr %q, %v; want %q", c.Registry.ZKAddr, err, tc.want)
			}
		})
	}
}
