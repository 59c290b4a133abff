package inbound

import "hookgate/storage"

// MatchType reports whether an event type matches an endpoint's event_types
// glob (storage.MatchType: path.Match's syntax, "*" matching "/" too).
func MatchType(glob, typ string) bool { return storage.MatchType(glob, typ) }

// ValidTypeGlob reports why glob cannot be an event_types filter, if it cannot.
func ValidTypeGlob(glob string) error { return storage.ValidTypeGlob(glob) }
