package badger

import "encoding/json"

// Records are JSON: readable with any Badger tool, and the same shapes the
// admin API shows.
func jsonMarshal(v any) ([]byte, error)   { return json.Marshal(v) }
func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
