package main

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestLoadConfig(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    config
		wantErr bool
	}{
		{"defaults", nil, defaultConfig(), false},
		{"all set", map[string]string{
			"ADDR": "127.0.0.1:9000", "BASE_URL": "https://Sho.RT/", "DATABASE_URL": "postgres://x",
			"DB_MAX_OPEN_CONNS": "16", "DB_MAX_IDLE_CONNS": "4", "DB_CONN_MAX_IDLE_TIME": "90s", "DB_CONN_MAX_LIFETIME": "0", "DB_PREPARE": "false",
			"DB_TIMEOUT": "2s", "REDIS_TIMEOUT": "20ms", "LOCAL_CACHE_SIZE": "0",
			"MAX_IN_FLIGHT": "0", "CREATE_RATE": "5", "CREATE_BURST": "1",
		}, func() config {
			c := defaultConfig()
			c.addr, c.baseURL, c.baseHost, c.databaseURL = "127.0.0.1:9000", "https://Sho.RT", "sho.rt", "postgres://x"
			c.pool = poolConfig{16, 4, 90 * time.Second, 0, false, 2 * time.Second, false, 0}
			c.clicks.syncTimeout = 2 * time.Second
			c.redisTimeout, c.localCache = 20*time.Millisecond, 0
			c.limits = limitConfig{maxInFlight: 0, createRate: 5, createBurst: 1}
			return c
		}(), false},
		{"cache ttl", map[string]string{"CACHE_TTL": "90s"}, func() config { c := defaultConfig(); c.cacheTTL = 90 * time.Second; return c }(), false},
		{"cache ttl zero", map[string]string{"CACHE_TTL": "0"}, config{}, true},
		{"cache ttl a nanosecond", map[string]string{"CACHE_TTL": "1ns"}, config{}, true},
		{"cache ttl negative", map[string]string{"CACHE_TTL": "-1s"}, config{}, true},
		{"cache ttl eleven years", map[string]string{"CACHE_TTL": "99999h"}, config{}, true},
		{"cache ttl a second", map[string]string{"CACHE_TTL": "1s"}, func() config { c := defaultConfig(); c.cacheTTL = time.Second; return c }(), false},
		{"redis pool negative", map[string]string{"REDIS_URL": "redis://127.0.0.1:6379/0?pool_size=-5"}, config{}, true},
		{"redis pool huge", map[string]string{"REDIS_URL": "redis://127.0.0.1:6379/0?pool_size=2000000000"}, config{}, true},
		{"cache ttl words", map[string]string{"CACHE_TTL": "long"}, config{}, true},
		{"redis url not a url", map[string]string{"REDIS_URL": "127.0.0.1:6379"}, config{}, true},
		{"redis url wrong scheme", map[string]string{"REDIS_URL": "http://127.0.0.1:6379"}, config{}, true},
		{"redis url bad db", map[string]string{"REDIS_URL": "redis://127.0.0.1:6379/x"}, config{}, true},
		{"trusted proxies", map[string]string{"TRUSTED_PROXIES": "127.0.0.1/32, ::1"}, func() config {
			c := defaultConfig()
			c.trustedProxies = trustedProxies{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}
			return c
		}(), false},
		{"clicks sync rows", map[string]string{"CLICKS": "sync", "CLICK_STORAGE": "rows", "DATABASE_URL": "postgres://x",
			"CLICK_QUEUE_SIZE": "5", "CLICK_BATCH": "2", "CLICK_FLUSH": "250ms"}, func() config {
			c := defaultConfig()
			c.databaseURL = "postgres://x"
			c.clicks = clickConfig{mode: "sync", storage: "rows", queue: 5, batch: 2, every: 250 * time.Millisecond, syncTimeout: defaultDBTimeout}
			return c
		}(), false},
		{"clicks maybe", map[string]string{"CLICKS": "maybe"}, config{}, true},
		{"clicks upper case", map[string]string{"CLICKS": "QUEUE"}, config{}, true},
		{"click rows in memory", map[string]string{"CLICK_STORAGE": "rows"}, config{}, true},
		{"click queue zero", map[string]string{"CLICK_QUEUE_SIZE": "0"}, config{}, true},
		{"click queue huge", map[string]string{"CLICK_QUEUE_SIZE": "99999999"}, config{}, true},
		{"click batch words", map[string]string{"CLICK_BATCH": "many"}, config{}, true},
		{"click flush zero", map[string]string{"CLICK_FLUSH": "0"}, config{}, true},
		{"click flush an hour", map[string]string{"CLICK_FLUSH": "1h"}, config{}, true},
		{"trusted proxies a name", map[string]string{"TRUSTED_PROXIES": "nginx"}, config{}, true},
		{"trusted proxies bad prefix", map[string]string{"TRUSTED_PROXIES": "10.0.0.0/40"}, config{}, true},
		{"negative open", map[string]string{"DB_MAX_OPEN_CONNS": "-1"}, config{}, true},
		{"words", map[string]string{"DB_MAX_IDLE_CONNS": "ten"}, config{}, true},
		{"duration without unit", map[string]string{"DB_CONN_MAX_IDLE_TIME": "30"}, config{}, true},
		{"prepare maybe", map[string]string{"DB_PREPARE": "maybe"}, config{}, true},
		{"negative duration", map[string]string{"DB_CONN_MAX_LIFETIME": "-1m"}, config{}, true},
		{"db timeout zero", map[string]string{"DB_TIMEOUT": "0"}, config{}, true},
		{"db timeout an hour", map[string]string{"DB_TIMEOUT": "1h"}, config{}, true},
		{"redis timeout zero", map[string]string{"REDIS_TIMEOUT": "0s"}, config{}, true},
		{"redis timeout no unit", map[string]string{"REDIS_TIMEOUT": "50"}, config{}, true},
		{"redis timeout a minute", map[string]string{"REDIS_TIMEOUT": "1m"}, config{}, true},
		{"local cache negative", map[string]string{"LOCAL_CACHE_SIZE": "-1"}, config{}, true},
		{"local cache huge", map[string]string{"LOCAL_CACHE_SIZE": "1000001"}, config{}, true},
		{"in flight negative", map[string]string{"MAX_IN_FLIGHT": "-5"}, config{}, true},
		{"in flight words", map[string]string{"MAX_IN_FLIGHT": "lots"}, config{}, true},
		{"create rate fraction", map[string]string{"CREATE_RATE": "0.5"}, config{}, true},
		{"create rate negative", map[string]string{"CREATE_RATE": "-1"}, config{}, true},
		{"create burst zero", map[string]string{"CREATE_BURST": "0"}, config{}, true},
		{"create burst huge", map[string]string{"CREATE_BURST": "2000000"}, config{}, true},
		{"redis prefix with space", map[string]string{"REDIS_KEY_PREFIX": "a b"}, config{}, true},
		{"redis prefix too long", map[string]string{"REDIS_KEY_PREFIX": strings.Repeat("x", 65)}, config{}, true},
		{"redis prefix", map[string]string{"REDIS_KEY_PREFIX": "short:"}, func() config { c := defaultConfig(); c.redisPrefix = "short:"; return c }(), false},
		{"limits off", map[string]string{"CREATE_RATE": "0", "MAX_IN_FLIGHT": "0"}, func() config {
			c := defaultConfig()
			c.limits.createRate, c.limits.maxInFlight = 0, 0
			return c
		}(), false},
		{"metrics and logs", map[string]string{"METRICS_ADDR": "off", "LOG_FORMAT": "json", "ACCESS_LOG": "1"}, func() config {
			c := defaultConfig()
			c.metricsAddr, c.logFormat, c.accessLog = "off", "json", true
			return c
		}(), false},
		{"metrics on the public port", map[string]string{"ADDR": ":9000", "METRICS_ADDR": ":9000"}, config{}, true},
		{"replica without primary", map[string]string{"DATABASE_REPLICA_URL": "postgres://x"}, config{}, true},
		{"log format unknown", map[string]string{"LOG_FORMAT": "xml"}, config{}, true},
		{"access log words", map[string]string{"ACCESS_LOG": "sometimes"}, config{}, true},
		{"base url without scheme", map[string]string{"BASE_URL": "sho.rt"}, config{}, true},
		{"base url with path query", map[string]string{"BASE_URL": "https://sho.rt/?x=1"}, config{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := loadConfig(func(k string) string { return tt.env[k] })
			if tt.wantErr {
				if err == nil {
					t.Errorf("loadConfig = %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("loadConfig: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("loadConfig = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestLoadConfigReportsEveryBadVariable: one start names every mistake, and
// a password in REDIS_URL is not repeated back.
func TestLoadConfigReportsEveryBadVariable(t *testing.T) {
	env := map[string]string{
		"DB_MAX_OPEN_CONNS": "-1", "DB_PREPARE": "maybe", "CACHE_TTL": "soon",
		"REDIS_URL": "redis://:s3cret@127.0.0.1:notaport", "BASE_URL": "sho.rt",
	}
	_, err := loadConfig(func(k string) string { return env[k] })
	if err == nil {
		t.Fatal("loadConfig accepted five bad variables")
	}
	for name := range env {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s:\n%v", name, err)
		}
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error repeats the Redis password:\n%v", err)
	}
}

func TestLoadConfigRedisURL(t *testing.T) {
	cfg, err := loadConfig(func(k string) string {
		return map[string]string{"REDIS_URL": "redis://127.0.0.1:6390/2"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.redis == nil || cfg.redis.Addr != "127.0.0.1:6390" || cfg.redis.DB != 2 {
		t.Errorf("REDIS_URL parsed as %+v, want addr 127.0.0.1:6390 db 2", cfg.redis)
	}
}
