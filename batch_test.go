package main

import (
	"fmt"
	"testing"
)

// TestCollect: the first item, then what the channel holds, up to the
// limit, without waiting; appended to the caller's slice.
func TestCollect(t *testing.T) {
	tests := []struct {
		queued, limit int
		want          []int
	}{
		{queued: 0, limit: 5, want: []int{0}},
		{queued: 2, limit: 5, want: []int{0, 1, 2}},
		{queued: 9, limit: 5, want: []int{0, 1, 2, 3, 4}},
		{queued: 3, limit: 1, want: []int{0}},
	}
	for _, tt := range tests {
		ch := make(chan int, 10)
		for i := range tt.queued {
			ch <- i + 1
		}
		got := collect(make([]int, 0, 2), ch, 0, tt.limit)
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("collect with %d queued, limit %d = %v, want %v", tt.queued, tt.limit, got, tt.want)
		}
		if left := max(0, tt.queued-(tt.limit-1)); len(ch) != left {
			t.Errorf("collect with %d queued, limit %d left %d in the channel, want %d", tt.queued, tt.limit, len(ch), left)
		}
	}
	// Appended after what the caller's slice held.
	ch := make(chan string, 2)
	ch <- "b"
	if got := collect([]string{"a"}, ch, "x", 3); fmt.Sprint(got) != "[a x b]" {
		t.Errorf("collect onto [a] = %v, want [a x b]", got)
	}
}
