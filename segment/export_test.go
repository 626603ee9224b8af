package segment

// Hooks for the external tests (package segment_test cannot see internals,
// and an internal test cannot import memstore: it imports segment).

// SetFloorWriteHook runs f before each write of a floor file (nil: none).
func SetFloorWriteHook(f func()) { floorWriteHook = f }

// NextStepFunc is the dynamic step rule.
var NextStepFunc = nextStep

// MarkCount is the number of ids used when the next segment starts loading.
var MarkCount = markCount

// SetNegativeCap changes the bound of the negative cache.
func SetNegativeCap(e *Engine, n int) {
	e.missMu.Lock()
	e.negCap = n
	e.missMu.Unlock()
}

// NegativeLen is the number of names in the negative cache.
func NegativeLen(e *Engine) int {
	e.missMu.Lock()
	defer e.missMu.Unlock()
	return len(e.negative)
}
