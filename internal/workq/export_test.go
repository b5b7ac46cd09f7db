package workq

// SetHookClaiming sets a function to run while AddAndTake claims a key.
func SetHookClaiming(f func()) { testHookClaiming = f }
