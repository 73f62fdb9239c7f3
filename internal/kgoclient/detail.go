package kgoclient

// Detail formats a broker's optional error message for appending to an
// error: ": message", or "" when the broker sent none.
func Detail(msg *string) string {
	if msg == nil || *msg == "" {
		return ""
	}
	return ": " + *msg
}
