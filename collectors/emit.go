package collectors

// Helpers of the collectors' Metrics methods. They live in no collector's
// file so that each collector file depends only on this package's common
// files (collectors.go, shared*.go, this one), hostfs and sample.

// boolFloat is a gauge's value for a condition: 1 or 0.
func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
