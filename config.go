package main

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The pool's defaults, chosen by the measurements in docs/03: as many open
// connections as Postgres can run at once on this machine with a margin, all
// of them kept idle between requests, and recycled slowly.
const (
	defaultMaxOpenConns    = 8
	defaultMaxIdleConns    = defaultMaxOpenConns
	defaultConnMaxIdleTime = 5 * time.Minute
	defaultConnMaxLifetime = 30 * time.Minute
	defaultPrepare         = true
)

// config is everything the program reads from its environment.
type config struct {
	addr    string // ADDR: where to listen, default ":8080"
	baseURL string // BASE_URL: prefix of short_url; empty means "from the request"
	// baseHost is BASE_URL's host name in the form normalizeURL produces,
	// used to refuse links that point back at the shortener.
	baseHost string

	databaseURL string     // DATABASE_URL: Postgres; empty means the memory store
	pool        poolConfig // DB_MAX_OPEN_CONNS, DB_MAX_IDLE_CONNS, DB_CONN_MAX_IDLE_TIME, DB_CONN_MAX_LIFETIME, DB_PREPARE
}

func loadConfig(getenv func(string) string) (config, error) {
	cfg := config{addr: getenv("ADDR"), databaseURL: getenv("DATABASE_URL")}
	if cfg.addr == "" {
		cfg.addr = ":8080"
	}
	var err error
	if cfg.pool.maxOpen, err = intEnv(getenv, "DB_MAX_OPEN_CONNS", defaultMaxOpenConns); err != nil {
		return config{}, err
	}
	if cfg.pool.maxIdle, err = intEnv(getenv, "DB_MAX_IDLE_CONNS", defaultMaxIdleConns); err != nil {
		return config{}, err
	}
	if cfg.pool.maxIdleTime, err = durationEnv(getenv, "DB_CONN_MAX_IDLE_TIME", defaultConnMaxIdleTime); err != nil {
		return config{}, err
	}
	if cfg.pool.maxLifetime, err = durationEnv(getenv, "DB_CONN_MAX_LIFETIME", defaultConnMaxLifetime); err != nil {
		return config{}, err
	}
	if cfg.pool.prepare, err = boolEnv(getenv, "DB_PREPARE", defaultPrepare); err != nil {
		return config{}, err
	}
	if raw := getenv("BASE_URL"); raw != "" {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return config{}, fmt.Errorf("config: BASE_URL %q is not an http or https URL like https://sho.rt", raw)
		}
		host, err := asciiHost(u.Hostname())
		if err != nil {
			return config{}, fmt.Errorf("config: BASE_URL %q: %w", raw, err)
		}
		cfg.baseHost = host
		cfg.baseURL = strings.TrimSuffix(raw, "/")
	}
	return cfg, nil
}

// intEnv reads a whole number of zero or more from the environment, or def
// if the variable is unset.
func intEnv(getenv func(string) string, name string, def int) (int, error) {
	raw := getenv(name)
	if raw == "" {
		return def, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("config: %s=%q: want a whole number, 0 or more", name, raw)
	}
	return n, nil
}

// durationEnv reads a duration such as "90s" or "5m" from the environment,
// or def if the variable is unset; "0" means no limit.
func durationEnv(getenv func(string) string, name string, def time.Duration) (time.Duration, error) {
	raw := getenv(name)
	if raw == "" {
		return def, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("config: %s=%q: want a duration like 90s or 5m, or 0", name, raw)
	}
	return d, nil
}

// boolEnv reads true or false (or 1 or 0) from the environment, or def if the
// variable is unset.
func boolEnv(getenv func(string) string, name string, def bool) (bool, error) {
	raw := getenv(name)
	if raw == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(raw)
	if err != nil {
		return false, fmt.Errorf("config: %s=%q: want true or false", name, raw)
	}
	return b, nil
}
