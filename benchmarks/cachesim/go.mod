module shortener/benchmarks/cachesim

go 1.26.0

require (
	github.com/hashicorp/golang-lru/v2 v2.0.7
	github.com/maypok86/otter/v2 v2.4.0
)
