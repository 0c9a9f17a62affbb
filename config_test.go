package main

import (
	"context"
	"io"
	"io/fs"
	"math"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
			"DB_TIMEOUT": "2s", "REDIS_TIMEOUT": "20ms", "LOCAL_CACHE_BYTES": "0",
			"MAX_IN_FLIGHT": "0", "CREATE_RATE": "5", "CREATE_BURST": "1",
		}, func() config {
			c := defaultConfig()
			c.addr, c.baseURL, c.baseHost, c.databaseURL = "127.0.0.1:9000", "https://Sho.RT", "sho.rt", "postgres://x"
			c.codes = "sequence"
			c.pool = poolConfig{16, 4, 90 * time.Second, 0, false, 2 * time.Second, false, 0, defaultDBClientCheck}
			c.clicks.syncTimeout = 2 * time.Second
			c.redisTimeout, c.localCacheBytes = 20*time.Millisecond, 0
			c.limits = limitConfig{maxInFlight: 0, createRate: 5, createBurst: 1}
			return c
		}(), false},
		{"db client check off", map[string]string{"DB_CLIENT_CHECK": "0"}, func() config { c := defaultConfig(); c.pool.clientCheck = 0; return c }(), false},
		{"db client check 250ms", map[string]string{"DB_CLIENT_CHECK": "250ms"}, func() config { c := defaultConfig(); c.pool.clientCheck = 250 * time.Millisecond; return c }(), false},
		{"db client check under 100ms", map[string]string{"DB_CLIENT_CHECK": "50ms"}, config{}, true},
		{"db client check no unit", map[string]string{"DB_CLIENT_CHECK": "1000"}, config{}, true},
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
		{"trusted proxies", map[string]string{"TRUSTED_PROXIES": "127.0.0.1/32, ::1", "BASE_URL": "https://sho.rt"}, func() config {
			c := defaultConfig()
			c.baseURL, c.baseHost = "https://sho.rt", "sho.rt"
			c.trustedProxies = trustedProxies{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}
			return c
		}(), false},
		{"trusted proxies everyone", map[string]string{"TRUSTED_PROXIES": "0.0.0.0/0"}, config{}, true},
		{"trusted proxies every ipv6", map[string]string{"TRUSTED_PROXIES": "::/0"}, config{}, true},
		{"trusted proxies everyone among others", map[string]string{"TRUSTED_PROXIES": "127.0.0.1, 10.1.2.3/0"}, config{}, true},
		{"base url with fragment", map[string]string{"BASE_URL": "https://sho.rt/#"}, config{}, true},
		{"base url with empty query", map[string]string{"BASE_URL": "https://sho.rt/?"}, config{}, true},
		{"base url with double slash", map[string]string{"BASE_URL": "https://sho.rt//"}, config{}, true},
		{"base url with double slash inside", map[string]string{"BASE_URL": "https://sho.rt/a//b"}, config{}, true},
		{"base url with space in host", map[string]string{"BASE_URL": "https://sho rt"}, config{}, true},
		{"base url with space in path", map[string]string{"BASE_URL": "https://sho.rt/a b"}, config{}, true},
		{"base url with tab", map[string]string{"BASE_URL": "https://sho.rt/a\tb"}, config{}, true},
		{"base url port 0", map[string]string{"BASE_URL": "https://sho.rt:0"}, config{}, true},
		{"base url port 99999", map[string]string{"BASE_URL": "https://sho.rt:99999"}, config{}, true},
		{"base url port empty", map[string]string{"BASE_URL": "https://sho.rt:"}, config{}, true},
		{"base url with user", map[string]string{"BASE_URL": "https://me@sho.rt"}, config{}, true},
		{"base url with port and path", map[string]string{"BASE_URL": "https://sho.rt:65535/l/"}, func() config {
			c := defaultConfig()
			c.baseURL, c.baseHost = "https://sho.rt:65535/l", "sho.rt"
			return c
		}(), false},
		{"conn lifetime a nanosecond", map[string]string{"DB_CONN_MAX_LIFETIME": "1ns"}, config{}, true},
		{"conn lifetime under a second", map[string]string{"DB_CONN_MAX_LIFETIME": "999ms"}, config{}, true},
		{"conn idle time a nanosecond", map[string]string{"DB_CONN_MAX_IDLE_TIME": "1ns"}, config{}, true},
		{"conn lifetime a second, idle time never", map[string]string{"DB_CONN_MAX_LIFETIME": "1s", "DB_CONN_MAX_IDLE_TIME": "0"}, func() config {
			c := defaultConfig()
			c.pool.maxLifetime, c.pool.maxIdleTime = time.Second, 0
			return c
		}(), false},
		{"open conns past the cap", map[string]string{"DB_MAX_OPEN_CONNS": "10001"}, config{}, true},
		{"open conns past int32", map[string]string{"DB_MAX_OPEN_CONNS": "99999999999"}, config{}, true},
		{"open conns past int64", map[string]string{"DB_MAX_OPEN_CONNS": "99999999999999999999999"}, config{}, true},
		{"idle conns past the cap", map[string]string{"DB_MAX_IDLE_CONNS": "10001"}, config{}, true},
		{"open conns at the cap", map[string]string{"DB_MAX_OPEN_CONNS": "10000"}, func() config { c := defaultConfig(); c.pool.maxOpen = 10000; return c }(), false},
		{"in flight with plus", map[string]string{"MAX_IN_FLIGHT": "+5"}, config{}, true},
		{"in flight with space", map[string]string{"MAX_IN_FLIGHT": " 5"}, config{}, true},
		{"in flight with underscore", map[string]string{"MAX_IN_FLIGHT": "1_000"}, config{}, true},
		{"in flight in hex", map[string]string{"MAX_IN_FLIGHT": "0x10"}, config{}, true},
		{"in flight two minuses", map[string]string{"MAX_IN_FLIGHT": "--5"}, config{}, true},
		{"in flight a minus", map[string]string{"MAX_IN_FLIGHT": "-"}, config{}, true},
		{"in flight leading zero", map[string]string{"MAX_IN_FLIGHT": "05"}, func() config { c := defaultConfig(); c.limits.maxInFlight = 5; return c }(), false},
		{"metrics on every interface", map[string]string{"METRICS_ADDR": "0.0.0.0:6060"}, config{}, true},
		{"metrics on every interface, no host", map[string]string{"METRICS_ADDR": ":6060"}, config{}, true},
		{"metrics on every ipv6 interface", map[string]string{"METRICS_ADDR": "[::]:6060"}, config{}, true},
		{"metrics on a name", map[string]string{"METRICS_ADDR": "metrics.example:6060"}, config{}, true},
		{"metrics without a port", map[string]string{"METRICS_ADDR": "127.0.0.1"}, config{}, true},
		{"metrics public maybe", map[string]string{"METRICS_ADDR": "0.0.0.0:6060", "METRICS_PUBLIC": "maybe"}, config{}, true},
		{"metrics public", map[string]string{"METRICS_ADDR": "0.0.0.0:6060", "METRICS_PUBLIC": "true"}, func() config {
			c := defaultConfig()
			c.metricsAddr = "0.0.0.0:6060"
			c.warnings = []string{"METRICS_PUBLIC=true: metrics and the profiler listen beyond this machine on 0.0.0.0:6060; keep that address behind a firewall"}
			return c
		}(), false},
		{"metrics on localhost", map[string]string{"METRICS_ADDR": "localhost:6060"}, func() config { c := defaultConfig(); c.metricsAddr = "localhost:6060"; return c }(), false},
		{"metrics on ipv6 loopback", map[string]string{"METRICS_ADDR": "[::1]:6060"}, func() config { c := defaultConfig(); c.metricsAddr = "[::1]:6060"; return c }(), false},
		{"local cache ttl", map[string]string{"LOCAL_CACHE_TTL": "24h"}, func() config { c := defaultConfig(); c.localCacheTTL = 24 * time.Hour; return c }(), false},
		{"local cache ttl zero", map[string]string{"LOCAL_CACHE_TTL": "0"}, config{}, true},
		{"local cache ttl under a second", map[string]string{"LOCAL_CACHE_TTL": "999ms"}, config{}, true},
		{"local cache ttl over a day", map[string]string{"LOCAL_CACHE_TTL": "25h"}, config{}, true},
		{"idle conns max", map[string]string{"IDLE_CONNS_MAX": "5"}, func() config { c := defaultConfig(); c.idleConnsMax = 5; return c }(), false},
		{"idle conns max off", map[string]string{"IDLE_CONNS_MAX": "0"}, func() config { c := defaultConfig(); c.idleConnsMax = 0; return c }(), false},
		{"idle conns max negative", map[string]string{"IDLE_CONNS_MAX": "-1"}, config{}, true},
		{"idle conns max huge", map[string]string{"IDLE_CONNS_MAX": "1000001"}, config{}, true},
		{"tls", map[string]string{"TLS_CERT_FILE": "c.pem", "TLS_KEY_FILE": "k.pem"}, func() config { c := defaultConfig(); c.tlsCert, c.tlsKey = "c.pem", "k.pem"; return c }(), false},
		{"tls cert without key", map[string]string{"TLS_CERT_FILE": "c.pem"}, config{}, true},
		{"tls key without cert", map[string]string{"TLS_KEY_FILE": "k.pem"}, config{}, true},
		{"clicks sync rows", map[string]string{"CLICKS": "sync", "CLICK_STORAGE": "rows", "DATABASE_URL": "postgres://x",
			"CLICK_QUEUE_SIZE": "5", "CLICK_BATCH": "2", "CLICK_FLUSH": "250ms"}, func() config {
			c := defaultConfig()
			c.codes = "sequence"
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
		{"bloom and negative cache", map[string]string{"BLOOM": "off", "BLOOM_FP_RATE": "0.001", "BLOOM_ACK_TIMEOUT": "200ms",
			"NEG_CACHE_SIZE": "0", "NEG_CACHE_TTL": "1m"}, func() config {
			c := defaultConfig()
			c.bloom, c.bloomFPRate, c.bloomAckTimeout, c.negCacheSize, c.negCacheTTL = false, 0.001, 200*time.Millisecond, 0, time.Minute
			return c
		}(), false},
		{"bloom on", map[string]string{"BLOOM": "on", "BLOOM_FP_RATE": ".25", "NEG_CACHE_SIZE": "10000000"}, func() config {
			c := defaultConfig()
			c.bloomFPRate, c.negCacheSize = 0.25, 10_000_000
			return c
		}(), false},
		{"bloom true", map[string]string{"BLOOM": "true"}, config{}, true},
		{"bloom upper case", map[string]string{"BLOOM": "ON"}, config{}, true},
		{"bloom fp rate zero", map[string]string{"BLOOM_FP_RATE": "0"}, config{}, true},
		{"bloom fp rate a half", map[string]string{"BLOOM_FP_RATE": "0.5"}, config{}, true},
		{"bloom fp rate one", map[string]string{"BLOOM_FP_RATE": "1"}, config{}, true},
		{"bloom fp rate exponent", map[string]string{"BLOOM_FP_RATE": "1e-2"}, config{}, true},
		{"bloom fp rate plus", map[string]string{"BLOOM_FP_RATE": "+0.01"}, config{}, true},
		{"bloom fp rate negative", map[string]string{"BLOOM_FP_RATE": "-0.01"}, config{}, true},
		{"bloom fp rate nan", map[string]string{"BLOOM_FP_RATE": "NaN"}, config{}, true},
		{"bloom fp rate two points", map[string]string{"BLOOM_FP_RATE": "0.0.1"}, config{}, true},
		{"bloom fp rate a point", map[string]string{"BLOOM_FP_RATE": "."}, config{}, true},
		{"bloom fp rate space", map[string]string{"BLOOM_FP_RATE": " 0.01"}, config{}, true},
		{"bloom fp rate percent", map[string]string{"BLOOM_FP_RATE": "1%"}, config{}, true},
		{"bloom ack timeout zero", map[string]string{"BLOOM_ACK_TIMEOUT": "0"}, config{}, true},
		{"bloom ack timeout no unit", map[string]string{"BLOOM_ACK_TIMEOUT": "50"}, config{}, true},
		{"bloom ack timeout a minute", map[string]string{"BLOOM_ACK_TIMEOUT": "1m"}, config{}, true},
		{"bloom sweep off", map[string]string{"BLOOM_SWEEP": "0"}, func() config { c := defaultConfig(); c.bloomSweep = 0; return c }(), false},
		{"bloom sweep a minute", map[string]string{"BLOOM_SWEEP": "1m"}, func() config { c := defaultConfig(); c.bloomSweep = time.Minute; return c }(), false},
		{"bloom sweep no unit", map[string]string{"BLOOM_SWEEP": "10"}, config{}, true},
		{"bloom sweep under a second", map[string]string{"BLOOM_SWEEP": "500ms"}, config{}, true},
		{"bloom sweep two hours", map[string]string{"BLOOM_SWEEP": "2h"}, config{}, true},
		{"sentinels", map[string]string{"REDIS_SENTINELS": "10.0.0.1:26379, [::1]:26380", "REDIS_MASTER": "shortener"}, func() config {
			c := defaultConfig()
			c.redis, c.redisSentinels, c.redisMaster = &redis.Options{}, []string{"10.0.0.1:26379", "[::1]:26380"}, "shortener"
			c.redisWaitReplicas = 1 // its default with Sentinels (step 35)
			return c
		}(), false},
		{"sentinels and redis url", map[string]string{"REDIS_SENTINELS": "h:26379", "REDIS_MASTER": "m", "REDIS_URL": "redis://:pw@ignored:1/2"}, func() config {
			c := defaultConfig()
			o, err := redis.ParseURL("redis://:pw@ignored:1/2")
			if err != nil {
				panic(err) // a constant URL: a bug in this table
			}
			c.redis, c.redisSentinels, c.redisMaster = o, []string{"h:26379"}, "m"
			c.redisWaitReplicas = 1
			return c
		}(), false},
		{"sentinels with their own password", map[string]string{"REDIS_SENTINELS": "h:26379", "REDIS_MASTER": "m",
			"REDIS_SENTINEL_USERNAME": "watcher", "REDIS_SENTINEL_PASSWORD": "s3cret"}, func() config {
			c := defaultConfig()
			c.redis, c.redisSentinels, c.redisMaster = &redis.Options{}, []string{"h:26379"}, "m"
			c.redisSentinelUser, c.redisSentinelPassword = "watcher", "s3cret"
			c.redisWaitReplicas = 1
			return c
		}(), false},
		{"sentinels waiting for no replica", map[string]string{"REDIS_SENTINELS": "h:26379", "REDIS_MASTER": "m", "REDIS_WAIT_REPLICAS": "0"}, func() config {
			c := defaultConfig()
			c.redis, c.redisSentinels, c.redisMaster = &redis.Options{}, []string{"h:26379"}, "m"
			return c
		}(), false},
		{"redis url waiting for two replicas", map[string]string{"REDIS_URL": "redis://h:1/0", "REDIS_WAIT_REPLICAS": "2"}, func() config {
			c := defaultConfig()
			o, err := redis.ParseURL("redis://h:1/0")
			if err != nil {
				panic(err) // a constant URL: a bug in this table
			}
			c.redis, c.redisWaitReplicas = o, 2
			return c
		}(), false},
		{"wait replicas without redis", map[string]string{"REDIS_WAIT_REPLICAS": "1"}, config{}, true},
		{"wait replicas too many", map[string]string{"REDIS_URL": "redis://h:1/0", "REDIS_WAIT_REPLICAS": "17"}, config{}, true},
		{"sentinel password without sentinels", map[string]string{"REDIS_URL": "redis://h:1/0", "REDIS_SENTINEL_PASSWORD": "s3cret"}, config{}, true},
		{"sentinel user without password", map[string]string{"REDIS_SENTINELS": "h:26379", "REDIS_MASTER": "m", "REDIS_SENTINEL_USERNAME": "watcher"}, config{}, true},
		{"bloom sweep off with redis", map[string]string{"DATABASE_URL": "postgres://h/db", "REDIS_URL": "redis://h:1/0", "BLOOM_SWEEP": "0"}, config{}, true},
		{"sentinels without master", map[string]string{"REDIS_SENTINELS": "h:26379"}, config{}, true},
		{"master without sentinels", map[string]string{"REDIS_MASTER": "m"}, config{}, true},
		{"sentinel without port", map[string]string{"REDIS_SENTINELS": "h", "REDIS_MASTER": "m"}, config{}, true},
		{"sentinel port zero", map[string]string{"REDIS_SENTINELS": "h:0", "REDIS_MASTER": "m"}, config{}, true},
		{"sentinel empty in list", map[string]string{"REDIS_SENTINELS": "h:1,,h:2", "REDIS_MASTER": "m"}, config{}, true},
		{"master with a space", map[string]string{"REDIS_SENTINELS": "h:1", "REDIS_MASTER": "my master"}, config{}, true},
		{"bloom sweep negative", map[string]string{"BLOOM_SWEEP": "-10s"}, config{}, true},
		{"bloom sweep words", map[string]string{"BLOOM_SWEEP": "often"}, config{}, true},
		{"stats off", map[string]string{"STATS": "off"}, func() config { c := defaultConfig(); c.stats.on = false; return c }(), false},
		{"stats kept and top", map[string]string{"STATS_TOP": "25", "STATS_HOURS_KEEP": "1", "STATS_DAYS_KEEP": "120"}, func() config {
			c := defaultConfig()
			c.stats.top, c.stats.keep = 25, statsKeep{hours: 1, days: 120}
			return c
		}(), false},
		{"stats maybe", map[string]string{"STATS": "maybe"}, config{}, true},
		{"stats top zero", map[string]string{"STATS_TOP": "0"}, config{}, true},
		{"stats top a thousand", map[string]string{"STATS_TOP": "1000"}, config{}, true},
		{"stats hours kept zero", map[string]string{"STATS_HOURS_KEEP": "0"}, config{}, true},
		{"stats days kept in days", map[string]string{"STATS_DAYS_KEEP": "30d"}, config{}, true},
		{"stats days kept past ten years", map[string]string{"STATS_DAYS_KEEP": "121"}, config{}, true},
		{"neg cache size negative", map[string]string{"NEG_CACHE_SIZE": "-1"}, config{}, true},
		{"neg cache size huge", map[string]string{"NEG_CACHE_SIZE": "10000001"}, config{}, true},
		{"neg cache ttl zero", map[string]string{"NEG_CACHE_TTL": "0"}, config{}, true},
		{"neg cache ttl an hour", map[string]string{"NEG_CACHE_TTL": "1h"}, config{}, true},
		{"replica without primary", map[string]string{"DATABASE_REPLICA_URL": "postgres://x"}, config{}, true},
		{"replica max lag", map[string]string{"REPLICA_MAX_LAG": "250ms"}, func() config { c := defaultConfig(); c.replicaMaxLag = 250 * time.Millisecond; return c }(), false},
		{"replica max lag an hour", map[string]string{"REPLICA_MAX_LAG": "1h"}, func() config { c := defaultConfig(); c.replicaMaxLag = time.Hour; return c }(), false},
		{"replica max lag zero", map[string]string{"REPLICA_MAX_LAG": "0"}, config{}, true},
		{"replica max lag under 100ms", map[string]string{"REPLICA_MAX_LAG": "99ms"}, config{}, true},
		{"replica max lag over an hour", map[string]string{"REPLICA_MAX_LAG": "61m"}, config{}, true},
		{"log format unknown", map[string]string{"LOG_FORMAT": "xml"}, config{}, true},
		{"access log words", map[string]string{"ACCESS_LOG": "sometimes"}, config{}, true},
		{"base url without scheme", map[string]string{"BASE_URL": "sho.rt"}, config{}, true},
		{"base url with path query", map[string]string{"BASE_URL": "https://sho.rt/?x=1"}, config{}, true},
	}
	// Every bad value must be refused with an error that names it.
	for _, tt := range tests {
		if tt.wantErr && len(tt.env) == 1 {
			for name, raw := range tt.env {
				if _, err := loadConfig(func(k string) string { return tt.env[k] }); err == nil || !strings.Contains(err.Error(), name) {
					t.Errorf("%s=%q: error %v does not name %s", name, raw, err, name)
				}
			}
		}
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

// TestLoadConfigRefusalsNameTheirVariable: the refusals that look at two
// variables at once name the one to change, and a Sentinel password is
// never repeated back. BLOOM_SWEEP=0 is refused only where other
// instances depend on the sweep (issue 24, items 3 and 6).
func TestLoadConfigRefusalsNameTheirVariable(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		name string // "" = accepted
	}{
		{map[string]string{"DATABASE_URL": "postgres://h/db", "REDIS_URL": "redis://h:1/0", "BLOOM_SWEEP": "0"}, "BLOOM_SWEEP"},
		{map[string]string{"DATABASE_URL": "postgres://h/db", "REDIS_SENTINELS": "h:1", "REDIS_MASTER": "m", "BLOOM_SWEEP": "0"}, "BLOOM_SWEEP"},
		{map[string]string{"DATABASE_URL": "postgres://h/db", "REDIS_URL": "redis://h:1/0", "BLOOM_SWEEP": "0", "BLOOM": "off"}, ""},
		{map[string]string{"DATABASE_URL": "postgres://h/db", "BLOOM_SWEEP": "0"}, ""},
		{map[string]string{"REDIS_URL": "redis://h:1/0", "REDIS_SENTINEL_PASSWORD": "s3cret"}, "REDIS_SENTINEL_PASSWORD"},
		{map[string]string{"REDIS_SENTINEL_USERNAME": "watcher", "REDIS_SENTINEL_PASSWORD": "s3cret"}, "REDIS_SENTINEL_USERNAME"},
		{map[string]string{"REDIS_SENTINELS": "h:1", "REDIS_MASTER": "m", "REDIS_SENTINEL_USERNAME": "watcher"}, "REDIS_SENTINEL_PASSWORD"},
	} {
		_, err := loadConfig(func(k string) string { return tt.env[k] })
		switch {
		case tt.name == "" && err != nil:
			t.Errorf("%v: %v, want it accepted", tt.env, err)
		case tt.name != "" && (err == nil || !strings.Contains(err.Error(), tt.name)):
			t.Errorf("%v: error %v, want one naming %s", tt.env, err, tt.name)
		case err != nil && strings.Contains(err.Error(), "s3cret"):
			t.Errorf("%v: the error repeats the password: %v", tt.env, err)
		}
	}
}

// TestLoadConfigReportsEveryBadVariable: one start names every mistake, and
// a password in REDIS_URL is not repeated back.
func TestLoadConfigReportsEveryBadVariable(t *testing.T) {
	env := map[string]string{
		"DB_MAX_OPEN_CONNS": "99999999999", "DB_PREPARE": "maybe", "CACHE_TTL": "soon",
		"REDIS_URL": "redis://:s3cret@127.0.0.1:notaport", "BASE_URL": "https://sho.rt/#",
		"TRUSTED_PROXIES": "::/0", "DB_CONN_MAX_LIFETIME": "1ns", "MAX_IN_FLIGHT": "+5",
		"METRICS_ADDR": "0.0.0.0:6060", "LOCAL_CACHE_TTL": "0", "IDLE_CONNS_MAX": "-1",
		"LOCAL_CACHE_BYTES": "8MB", "LOCAL_CACHE_SIZE": "10000",
		"BLOOM": "yes", "BLOOM_FP_RATE": "1e-2", "BLOOM_ACK_TIMEOUT": "0", "NEG_CACHE_SIZE": "-1", "NEG_CACHE_TTL": "forever",
		"BLOOM_SWEEP": "soon",
	}
	_, err := loadConfig(func(k string) string { return env[k] })
	if err == nil {
		t.Fatalf("loadConfig accepted %d bad variables", len(env))
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

// TestIntSettingsAreStrict: every whole-number setting takes digits only,
// so that none has a second spelling ("+5") or wraps past the int range.
func TestIntSettingsAreStrict(t *testing.T) {
	names := []string{"CREATE_BATCH", "DB_MAX_OPEN_CONNS", "DB_MAX_IDLE_CONNS", "MAX_IN_FLIGHT",
		"CREATE_RATE", "CREATE_BURST", "CLICK_QUEUE_SIZE", "CLICK_BATCH", "IDLE_CONNS_MAX", "NEG_CACHE_SIZE"}
	for _, name := range names {
		for _, raw := range []string{"+5", " 5", "5 ", "5.0", "1e3", "0x5", "1_0", "٥", "99999999999999999999"} {
			cfg, err := loadConfig(func(k string) string { return map[string]string{name: raw}[k] })
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%q: loadConfig = %+v, %v; want an error naming %s", name, raw, cfg, err, name)
			}
		}
		if _, err := loadConfig(func(k string) string { return map[string]string{name: "5"}[k] }); err != nil {
			t.Errorf("%s=5: %v, want it accepted", name, err)
		}
	}
}

// TestLoadConfigLocalCacheBytes: LOCAL_CACHE_BYTES takes bytes, or a whole
// number of KiB, MiB or GiB, from 1 MiB to 1 TiB, or 0 for none, and
// refuses any other spelling, and any figure that would wrap; unset, run
// picks it (localCacheAuto). LOCAL_CACHE_SIZE, which counted links, is
// refused whatever its value, with a message that names the new setting.
func TestLoadConfigLocalCacheBytes(t *testing.T) {
	good := []struct {
		raw  string
		want int64
	}{
		{"", localCacheAuto},
		{"0", 0},
		{"0MiB", 0},
		{"1048576", 1 << 20},
		{"1024KiB", 1 << 20},
		{"64MiB", 64 << 20},
		{"3GiB", 3 << 30},
		{"1024GiB", 1 << 40},
		{"0064MiB", 64 << 20},
	}
	for _, tt := range good {
		cfg, err := loadConfig(func(k string) string { return map[string]string{"LOCAL_CACHE_BYTES": tt.raw}[k] })
		if err != nil || cfg.localCacheBytes != tt.want {
			t.Errorf("LOCAL_CACHE_BYTES=%q: %d bytes, error %v; want %d", tt.raw, cfg.localCacheBytes, err, tt.want)
		}
	}
	bad := []string{
		"-1", "-64MiB", "+64MiB", " 64MiB", "64MiB ", "64 MiB", "1.5MiB", "1e9", "0x100000", "1_048_576",
		"64MB", "64M", "64mib", "64MIB", "64Mi", "1TiB", "MiB", "KiB64", "64MiBMiB", "٦٤MiB",
		"1048575", "1023KiB", // under 1 MiB
		"1025GiB", "1099511627777", // over 1 TiB
		"9007199254740992GiB", "8589934592GiB", // past int64 once multiplied
		"99999999999999999999", "9223372036854775808", // past int64 as digits
	}
	for _, raw := range bad {
		cfg, err := loadConfig(func(k string) string { return map[string]string{"LOCAL_CACHE_BYTES": raw}[k] })
		if err == nil || !strings.Contains(err.Error(), "LOCAL_CACHE_BYTES") {
			t.Errorf("LOCAL_CACHE_BYTES=%q: %d bytes, error %v; want an error naming LOCAL_CACHE_BYTES", raw, cfg.localCacheBytes, err)
		}
	}
	for raw, want := range map[string]string{
		"10000": "set LOCAL_CACHE_BYTES instead",
		"0":     "set LOCAL_CACHE_BYTES=0",
		"abc":   "set LOCAL_CACHE_BYTES instead",
	} {
		for _, env := range []map[string]string{
			{"LOCAL_CACHE_SIZE": raw},
			{"LOCAL_CACHE_SIZE": raw, "LOCAL_CACHE_BYTES": "64MiB"}, // both: still refused
		} {
			_, err := loadConfig(func(k string) string { return env[k] })
			if err == nil || !strings.Contains(err.Error(), "LOCAL_CACHE_SIZE") || !strings.Contains(err.Error(), want) {
				t.Errorf("%v: error %v; want one naming LOCAL_CACHE_SIZE that says %q", env, err, want)
			}
		}
	}
}

// TestProcessMemory: the figure the local cache's default is a share of
// comes from GOMEMLIMIT, else the cgroup's limit if it is below the
// machine's memory, else MemTotal; a file that is missing or garbled is
// passed over.
func TestProcessMemory(t *testing.T) {
	const gib = 1 << 30
	meminfo := "MemTotal:       16777216 kB\nMemFree:         1234 kB\n" // 16 GiB
	v2 := "0::/system.slice/app.service\n"
	tests := []struct {
		name       string
		goMemLimit int64
		files      map[string]string
		want       memoryFigure
		ok         bool
	}{
		{"nothing", math.MaxInt64, nil, memoryFigure{}, false},
		{"gomemlimit", 3 * gib, map[string]string{"/proc/meminfo": meminfo}, memoryFigure{3 * gib, "GOMEMLIMIT"}, true},
		{"meminfo", math.MaxInt64, map[string]string{"/proc/meminfo": meminfo}, memoryFigure{16 * gib, "MemTotal"}, true},
		{"meminfo garbled", math.MaxInt64, map[string]string{"/proc/meminfo": "MemTotal: lots kB\n"}, memoryFigure{}, false},
		{"meminfo in MB", math.MaxInt64, map[string]string{"/proc/meminfo": "MemTotal: 16384 MB\n"}, memoryFigure{}, false},
		{"v2 limit", math.MaxInt64, map[string]string{
			"/proc/meminfo": meminfo, "/proc/self/cgroup": v2,
			"/sys/fs/cgroup/system.slice/app.service/memory.max": "2147483648\n",
		}, memoryFigure{2 * gib, "cgroup memory.max"}, true},
		{"v2 parent's limit is smaller", math.MaxInt64, map[string]string{
			"/proc/meminfo": meminfo, "/proc/self/cgroup": v2,
			"/sys/fs/cgroup/system.slice/app.service/memory.max": "max\n",
			"/sys/fs/cgroup/system.slice/memory.max":             "1073741824\n",
		}, memoryFigure{gib, "cgroup memory.max"}, true},
		{"v2 no limit", math.MaxInt64, map[string]string{
			"/proc/meminfo": meminfo, "/proc/self/cgroup": v2,
			"/sys/fs/cgroup/system.slice/app.service/memory.max": "max\n",
		}, memoryFigure{16 * gib, "MemTotal"}, true},
		{"v2 garbled limit", math.MaxInt64, map[string]string{
			"/proc/meminfo": meminfo, "/proc/self/cgroup": v2,
			"/sys/fs/cgroup/system.slice/app.service/memory.max": "-5\n",
		}, memoryFigure{16 * gib, "MemTotal"}, true},
		{"v2 container, its own cgroup at the top", math.MaxInt64, map[string]string{
			"/proc/meminfo": meminfo, "/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/memory.max": "536870912\n",
		}, memoryFigure{gib / 2, "cgroup memory.max"}, true},
		{"v2 limit above the machine", math.MaxInt64, map[string]string{
			"/proc/meminfo": meminfo, "/proc/self/cgroup": v2,
			"/sys/fs/cgroup/system.slice/app.service/memory.max": "68719476736\n",
		}, memoryFigure{16 * gib, "MemTotal"}, true},
		{"v2 limit, no meminfo", math.MaxInt64, map[string]string{
			"/proc/self/cgroup": v2, "/sys/fs/cgroup/system.slice/app.service/memory.max": "2147483648\n",
		}, memoryFigure{2 * gib, "cgroup memory.max"}, true},
		{"v1 limit", math.MaxInt64, map[string]string{
			"/proc/meminfo": meminfo, "/proc/self/cgroup": "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n0::/\n",
			"/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "4294967296\n",
		}, memoryFigure{4 * gib, "cgroup memory.limit_in_bytes"}, true},
		{"v1 container, its own cgroup at the top", math.MaxInt64, map[string]string{
			"/proc/meminfo": meminfo, "/proc/self/cgroup": "4:memory:/docker/abc\n",
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": "4294967296\n",
		}, memoryFigure{4 * gib, "cgroup memory.limit_in_bytes"}, true},
		{"v1 unlimited", math.MaxInt64, map[string]string{
			"/proc/meminfo": meminfo, "/proc/self/cgroup": "4:memory:/\n",
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
		}, memoryFigure{16 * gib, "MemTotal"}, true},
		{"gomemlimit over cgroup", 3 * gib, map[string]string{
			"/proc/meminfo": meminfo, "/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/memory.max": "536870912\n",
		}, memoryFigure{3 * gib, "GOMEMLIMIT"}, true},
	}
	for _, tt := range tests {
		readFile := func(name string) ([]byte, error) {
			if b, ok := tt.files[name]; ok {
				return []byte(b), nil
			}
			return nil, fs.ErrNotExist
		}
		got, ok := processMemory(tt.goMemLimit, readFile)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: processMemory = %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

// TestLocalCacheDefault: unset, LOCAL_CACHE_BYTES is a sixteenth of the
// memory figure, within its bounds, and a fixed size without a figure.
func TestLocalCacheDefault(t *testing.T) {
	tests := []struct {
		mem   int64
		known bool
		want  int64
	}{
		{1 << 30, true, 64 << 20},           // 1 GiB: a sixteenth
		{16 << 30, true, 256 << 20},         // 16 GiB: a sixteenth is the ceiling
		{64 << 30, true, 256 << 20},         // past it: the ceiling
		{512 << 20, true, 32 << 20},         // 512 MiB
		{16 << 20, true, 2 << 20},           // 16 MiB: a sixteenth is 1 MiB, under the floor
		{1, true, 2 << 20},                  // nonsense: the floor
		{0, false, fallbackLocalCacheBytes}, // nothing known
	}
	for _, tt := range tests {
		got, how := localCacheDefault(memoryFigure{tt.mem, "MemTotal"}, tt.known)
		if got != tt.want {
			t.Errorf("localCacheDefault(%d bytes, known %v) = %d, want %d (%s)", tt.mem, tt.known, got, tt.want, how)
		}
		if how == "" || tt.known && !strings.Contains(how, "MemTotal") {
			t.Errorf("localCacheDefault(%d bytes) says %q, want where the figure came from", tt.mem, how)
		}
	}
}

// TestLoadConfigWarnings: a setting that is allowed but risky is returned
// as a warning for run to log.
func TestLoadConfigWarnings(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string // "" for no warning
	}{
		{"nothing set", nil, ""},
		{"proxies without base url", map[string]string{"TRUSTED_PROXIES": "127.0.0.1"}, "BASE_URL is not set"},
		{"proxies with base url", map[string]string{"TRUSTED_PROXIES": "127.0.0.1", "BASE_URL": "https://sho.rt"}, ""},
		{"base url alone", map[string]string{"BASE_URL": "https://sho.rt"}, ""},
		{"public metrics", map[string]string{"METRICS_ADDR": "0.0.0.0:0", "METRICS_PUBLIC": "true"}, "METRICS_PUBLIC=true"},
		{"metrics public but loopback", map[string]string{"METRICS_ADDR": "127.0.0.1:0", "METRICS_PUBLIC": "true"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := loadConfig(func(k string) string { return tt.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(cfg.warnings, "\n")
			if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
				t.Errorf("warnings = %q, want one saying %q", got, tt.want)
			}
		})
	}
}

// TestRunLogsWarnings: run logs the warnings loadConfig returns, at start.
func TestRunLogsWarnings(t *testing.T) {
	_, stop, logs := startRun(t, map[string]string{"ADDR": "127.0.0.1:0", "TRUSTED_PROXIES": "127.0.0.1"})
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "BASE_URL is not set") {
		t.Errorf("log does not warn that BASE_URL is not set:\n%s", logs)
	}
}

// TestDatabasePasswordNotPrinted: start-up errors from a DATABASE_URL or a
// DATABASE_REPLICA_URL (both go through openPostgres) do not repeat its
// password, in any of the forms it may be written.
func TestDatabasePasswordNotPrinted(t *testing.T) {
	const secret = "s3cretPW"
	dsns := []string{
		"postgres://app:" + secret + "@127.0.0.1:notaport/db",                            // url.Parse quotes the URL
		"postgres://app:" + secret + "%zz@127.0.0.1/db",                                  // a bad escape
		"postgres://app:" + secret + "@127.0.0.1:1/db?sslmode=disable&connect_timeout=5", // nobody listening
		"postgres://app:" + secret + "@[::1/db",                                          // a broken host
		"host=127.0.0.1 port=1 user=app password=" + secret + " sslmode=disable connect_timeout=5",
		"host=127.0.0.1 port=1 password='" + secret + " x' sslmode=disable connect_timeout=5",
		"host=127.0.0.1 password=" + secret + " port=notaport",
		"postgres://app:" + secret + "@127.0.0.1:5432/db?sslmode=bogus",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, dsn := range dsns {
		s, err := openPostgres(ctx, dsn, defaultConfig().pool)
		if err == nil {
			s.Close() //nolint:errcheck // the test fails anyway
			t.Errorf("openPostgres(%q) = nil error, want one", dsn)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("openPostgres(%q): error repeats the password: %v", dsn, err)
		}
	}
	// And through run, as an operator sees it.
	for _, name := range []string{"DATABASE_URL", "DATABASE_REPLICA_URL"} {
		env := map[string]string{"ADDR": "127.0.0.1:0", "METRICS_ADDR": "off", "DATABASE_URL": dsns[0]}
		if name == "DATABASE_REPLICA_URL" {
			env["DATABASE_URL"] = testDatabase(t)
			env["CREATE_BATCH"] = "1"
			env[name] = dsns[0]
		}
		err := run(ctx, nil, func(k string) string { return env[k] }, io.Discard, io.Discard)
		if err == nil {
			t.Errorf("run with a bad %s returned nil, want an error", name)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("run with a bad %s: error repeats the password: %v", name, err)
		}
	}
}
