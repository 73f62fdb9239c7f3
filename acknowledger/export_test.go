package acknowledger

// State names the state of a's producer (tests only).
func State(a *Acknowledger) string { return a.p.Status().State }
