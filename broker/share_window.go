package broker

// A share-partition's records, live (share_partition.go) and persisted
// (share_state.go), are a window of offsets: new ones join at the end,
// finished ones leave at the head. Both keep the window in a slice of one
// array that is reused: a head that leaves frees the array's front, and
// the window moves back to the front when it reaches the array's end, so a
// share-partition in steady use allocates nothing per record (profiles of
// the share path showed a new array per fetch: growslice and memclr).

// appendWindow appends v to w, a window in buf (w ends where buf's
// capacity does when it is full). When w is full it moves to the front of
// buf if at most half of buf is in use, or else to a new array twice w's
// length. It returns the new window and array.
func appendWindow[T any](w, buf []T, v T) ([]T, []T) {
	if len(w) == cap(w) {
		n := len(w)
		if cap(buf) == 0 || n > cap(buf)/2 {
			buf = make([]T, n, max(2*n, 64))
		}
		copy(buf[:n], w) // may overlap: copy moves
		w = buf[:n]
	}
	return append(w, v), buf
}

// dropWindow drops w's first n elements; an emptied window starts again
// at the front of buf.
func dropWindow[T any](w, buf []T, n int) []T {
	var zero T
	for i := range n {
		w[i] = zero // let go of what the element points to
	}
	if n == len(w) {
		return buf[:0]
	}
	return w[n:]
}
