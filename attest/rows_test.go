package attest

import (
	"encoding/json"
	"testing"
	"time"
)

// A decision row reads back as it was written, its rule's kind
// included; a row of a statement made before rows had the kind (one
// column fewer) reads with the kind empty.
func TestDecisionRows(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	full := EgressDecision{Time: start.Add(42 * time.Millisecond), PID: 7, Protocol: "tls", Name: "evil.test", Port: 443,
		Decision: "denied", Rule: "fronting", Reason: "TLS server name", BytesOut: 3, BytesIn: 4, RuleKind: "fronting"}
	old := full
	old.RuleKind = ""
	for _, tc := range []struct {
		name string
		row  json.RawMessage
		want EgressDecision
	}{
		{"with its kind", full.Row(start), full},
		{"an older row", json.RawMessage(`[42,7,"tls","evil.test","",443,"","","denied","fronting","TLS server name","",3,4]`), old},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := Egress{Start: start, Columns: DecisionColumns, Decisions: []json.RawMessage{tc.row}}.Rows()
			if len(rows) != 1 || rows[0] != tc.want {
				t.Fatalf("rows = %+v, want %+v", rows, tc.want)
			}
		})
	}
	var cols []any
	if err := json.Unmarshal(full.Row(start), &cols); err != nil || len(cols) != len(DecisionColumns) || DecisionColumns[len(cols)-1] != "ruleKind" {
		t.Errorf("row %v (%v) under columns %v", cols, err, DecisionColumns)
	}
}
