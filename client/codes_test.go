package client

import (
	"os"
	"regexp"
	"testing"

	"github.com/leafmq/leafmq/wire"
)

// The codes the client asks again after are wire.Codes' retryable ones,
// and the README's table of codes says the same of every code.
func TestRetryableCodesAgree(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rowRE := regexp.MustCompile("(?m)^ *\\| `([0-9]{3})` \\| .* \\| (yes|no) \\|$")
	rows := map[string]bool{}
	for _, m := range rowRE.FindAllStringSubmatch(string(readme), -1) {
		rows[m[1]] = m[2] == "yes"
	}
	if len(rows) != len(wire.Codes) {
		t.Errorf("README's table of codes has %v, want a row for each of %v", rows, wire.Codes)
	}
	for _, c := range wire.Codes {
		if got := retryable(&wire.Error{Code: c.Code, Message: "x"}); got != c.Retryable {
			t.Errorf("client retries %s: %v, wire.Codes says %v", c.Code, got, c.Retryable)
		}
		if readmeSays, ok := rows[c.Code]; !ok || readmeSays != c.Retryable {
			t.Errorf("README says %s is retried: %v (row there: %v), wire.Codes says %v", c.Code, readmeSays, ok, c.Retryable)
		}
	}
	if !retryable(&wire.Error{Code: wire.CodeUnavailable}) || retryable(&wire.Error{Code: wire.CodeBadRequest}) {
		t.Error("503 must be retried and 400 not")
	}
}
