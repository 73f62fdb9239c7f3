package broker

// The coordinators write a JSON record for every state change
// (__transaction_state, __share_group_state); encoding/json's reflection
// was a visible part of the transaction and share paths' CPU profiles. The
// hot encoders append their JSON by hand, byte for byte what encoding/json
// writes (tests compare the two on random values), and fall back to
// encoding/json for strings that would need escaping.

// appendPlainString appends s quoted, as encoding/json writes it, and
// reports true, when s needs no escaping there: printable ASCII other than
// '"', '\\' and the HTML characters encoding/json escapes ('<', '>', '&').
// Otherwise it returns b unchanged and false.
func appendPlainString(b []byte, s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return b, false
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), true
}
