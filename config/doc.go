// Package config is a leafd's configuration: Config, one struct per
// subsystem (NATSConfig, HTTPConfig, StoreConfig, RegistryConfig,
// SnowflakeConfig, PoolConfig, LogConfig, FaultConfig), each with one
// settings table (config.go): a row per setting names its flag, its LEAF_*
// variable, its default and its help. Parse, leafd -h (FlagSet), Validate's
// defaults and the README's Configuration table all follow the tables, so
// a setting is added in one place. The zero Config is the zero-setup
// default: Validate fills every zero setting before it checks them.
//
// Every refusal of a configuration wraps ErrConfig. Validate checks the
// settings against each other and against this host: it reads the opaque
// key file and resolves the ZooKeeper hosts (a loopback identity is
// refused when ZooKeeper is elsewhere), and connects to nothing; package
// node builds a leafd from a validated Config.
package config
