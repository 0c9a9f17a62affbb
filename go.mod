module shortener

go 1.26

require golang.org/x/net v0.48.0

require golang.org/x/text v0.32.0 // indirect
