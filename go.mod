module shortener

go 1.26

require golang.org/x/net v0.48.0

require (
	github.com/lib/pq v1.12.3 // indirect
	golang.org/x/text v0.32.0 // indirect
)
