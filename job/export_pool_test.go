package job

import "time"

// SetShrinkEvery sets how often the pool lowers a grown target (tests).
func SetShrinkEvery(d time.Duration) func() {
	old := shrinkEvery
	shrinkEvery = d
	return func() { shrinkEvery = old }
}
