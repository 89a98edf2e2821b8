package uploads

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// parseMessage reads the named fields of a twirp JSON message as the
// service reads them (protojson): a field may be spelled by its proto
// name (workflow_run_backend_id) or its JSON name (workflowRunBackendId),
// exactly, and only once in either spelling, so that what the recorder
// reads is what the service does (Go's encoding/json would match keys
// without regard to case and take the last of two). Strings, numbers
// and booleans come back as text; other fields are skipped.
func parseMessage(b []byte, fields ...string) (map[string]string, error) {
	names := map[string]string{}
	for _, f := range fields {
		names[f], names[jsonName(f)] = f, f
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object")
	}
	out := map[string]string{}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not valid JSON: %w", err)
		}
		key, _ := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("not valid JSON: %w", err)
		}
		f, ok := names[key]
		if !ok {
			continue
		}
		if seen[f] {
			return nil, fmt.Errorf("field %s given twice", f)
		}
		seen[f] = true
		v, err := scalar(raw)
		if err != nil {
			return nil, fmt.Errorf("field %s: %w", f, err)
		}
		out[f] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	// Nothing but space may follow: More would let a stray ']' or '}'
	// through ("{}}"), which the service refuses as not JSON.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("more than one JSON value")
	}
	return out, nil
}

// scalar is a JSON string, number, boolean or null as text.
func scalar(raw json.RawMessage) (string, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		return fmt.Sprint(x), nil
	}
	return "", fmt.Errorf("not a string, number or boolean")
}

// jsonName is protobuf's JSON name of a proto field name: lowerCamelCase.
func jsonName(f string) string {
	parts := strings.Split(f, "_")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}
