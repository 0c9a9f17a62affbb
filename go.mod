module shortener

go 1.26.0

require (
	github.com/hashicorp/golang-lru/v2 v2.0.7
	github.com/lib/pq v1.12.3
	github.com/redis/go-redis/v9 v9.23.0
	golang.org/x/net v0.48.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.32.0 // indirect
)
