package main

import (
	"fmt"
	"net/url"
	"strings"
)

// config is everything the program reads from its environment.
type config struct {
	addr    string // ADDR: where to listen, default ":8080"
	baseURL string // BASE_URL: prefix of short_url; empty means "from the request"
	// baseHost is BASE_URL's host name in the form normalizeURL produces,
	// used to refuse links that point back at the shortener.
	baseHost string
}

func loadConfig(getenv func(string) string) (config, error) {
	cfg := config{addr: getenv("ADDR")}
	if cfg.addr == "" {
		cfg.addr = ":8080"
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
