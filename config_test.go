package main

import (
	"testing"
	"time"
)

func TestLoadConfig(t *testing.T) {
	defaults := poolConfig{defaultMaxOpenConns, defaultMaxIdleConns, defaultConnMaxIdleTime, defaultConnMaxLifetime, defaultPrepare}
	tests := []struct {
		name    string
		env     map[string]string
		want    config
		wantErr bool
	}{
		{"defaults", nil, config{addr: ":8080", pool: defaults}, false},
		{"all set", map[string]string{
			"ADDR": "127.0.0.1:9000", "BASE_URL": "https://Sho.RT/", "DATABASE_URL": "postgres://x",
			"DB_MAX_OPEN_CONNS": "16", "DB_MAX_IDLE_CONNS": "4", "DB_CONN_MAX_IDLE_TIME": "90s", "DB_CONN_MAX_LIFETIME": "0", "DB_PREPARE": "false",
		}, config{
			addr: "127.0.0.1:9000", baseURL: "https://Sho.RT", baseHost: "sho.rt", databaseURL: "postgres://x",
			pool: poolConfig{16, 4, 90 * time.Second, 0, false},
		}, false},
		{"negative open", map[string]string{"DB_MAX_OPEN_CONNS": "-1"}, config{}, true},
		{"words", map[string]string{"DB_MAX_IDLE_CONNS": "ten"}, config{}, true},
		{"duration without unit", map[string]string{"DB_CONN_MAX_IDLE_TIME": "30"}, config{}, true},
		{"prepare maybe", map[string]string{"DB_PREPARE": "maybe"}, config{}, true},
		{"negative duration", map[string]string{"DB_CONN_MAX_LIFETIME": "-1m"}, config{}, true},
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
			if got != tt.want {
				t.Errorf("loadConfig = %+v, want %+v", got, tt.want)
			}
		})
	}
}
