package sample

// Key names one collector's samples and carries their type: the collector
// registered under the key produces *S, and the window holds them under
// Name. Each collector's key is declared next to its sample type, so that
// the collector writing samples and the Input builder reading them agree
// through the compiler, not through a string.
type Key[S any] struct{ name string }

// NewKey returns the key of the collector called name, whose samples are *S.
func NewKey[S any](name string) Key[S] { return Key[S]{name: name} }

// Name is the collector's name: its flags, its metrics' collector label, its
// records in a trace.
func (k Key[S]) Name() string { return k.name }

// New returns an empty sample to decode a recorded one into.
func (k Key[S]) New() any { return new(S) }
