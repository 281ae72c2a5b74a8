package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

func check(t *testing.T, input string, args ...string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(append(args, "-"), strings.NewReader(input), &out, &errOut)
	return code, out.String() + errOut.String()
}

func TestConcurrentOperationsMayReturnValuesInAnyOrder(t *testing.T) {
	// Clients 0 and 1 overlap, so 8 may come back to the one called first; client 2
	// starts after both returned and gets a run above both.
	in := `{"client":0,"call":0,"return":100,"lo":8,"hi":8}
{"client":1,"call":10,"return":90,"lo":5,"hi":5}
{"client":2,"call":101,"return":150,"lo":9,"hi":11}
`
	code, out := check(t, in)
	if code != exitLinearizable || !strings.Contains(out, "linearizable: 3 operations") {
		t.Fatalf("exit %d: %s", code, out)
	}
}

func TestTouchingIntervalsAreConcurrent(t *testing.T) {
	in := `{"client":0,"call":0,"return":100,"lo":8,"hi":8}
{"client":1,"call":100,"return":200,"lo":5,"hi":5}
`
	if code, out := check(t, in); code != exitLinearizable {
		t.Fatalf("exit %d: %s", code, out)
	}
}

func TestALowerValueAfterAHigherOneReturnedIsNotLinearizable(t *testing.T) {
	in := `{"client":0,"call":0,"return":100,"lo":8,"hi":8}
{"client":1,"call":101,"return":200,"lo":5,"hi":5}
`
	code, out := check(t, in)
	if code != exitNotLinearizable || !strings.Contains(out, "real-time order violated") ||
		!strings.Contains(out, "line 1 ") || !strings.Contains(out, "line 2 ") {
		t.Fatalf("exit %d: %s", code, out)
	}
}

func TestAValueReturnedTwiceIsNotLinearizable(t *testing.T) {
	// Concurrent, so only the values say it.
	in := `{"client":0,"call":0,"return":100,"lo":12,"hi":12}
{"client":1,"call":5,"return":50,"lo":12,"hi":12}
`
	code, out := check(t, in)
	if code != exitNotLinearizable || !strings.Contains(out, "value 12 was returned twice") {
		t.Fatalf("exit %d: %s", code, out)
	}
	// 12 inside another concurrent run.
	in = `{"client":0,"call":0,"return":100,"lo":10,"hi":13}
{"client":1,"call":5,"return":50,"lo":12,"hi":12}
`
	code, out = check(t, in)
	if code != exitNotLinearizable || !strings.Contains(out, "share values or interleave") {
		t.Fatalf("exit %d: %s", code, out)
	}
}

func TestBadInputExits2NamingTheLine(t *testing.T) {
	for _, in := range []string{
		`{"client":0,"call":0,"return":1,"lo":1}`,
		`{"client":0,"call":5,"return":1,"lo":1,"hi":1}`,
		`{"client":0,"call":0,"return":1,"lo":2,"hi":1}`,
		`{"client":0,"call":0,"return":1,"lo":-1,"hi":1}`,
		`{"client":0,"call":0,"return":1,"lo":1,"hi":1,"extra":1}`,
		`not json`,
	} {
		code, out := check(t, "\n"+in+"\n")
		if code != exitBadInput || !strings.Contains(out, "line 2") {
			t.Errorf("%s: exit %d: %s", in, code, out)
		}
	}
}

func TestStretchesArePartitionedAndAViolationAcrossACutIsStillFound(t *testing.T) {
	// Two stretches with nothing in flight between them (return 100 < call 200); inside
	// each the values are fine, but the second stretch's 7 is below the first's 9.
	in := `{"client":0,"call":0,"return":100,"lo":8,"hi":9}
{"client":1,"call":50,"return":90,"lo":5,"hi":5}
{"client":0,"call":200,"return":300,"lo":7,"hi":7}
{"client":1,"call":210,"return":290,"lo":20,"hi":20}
`
	code, out := check(t, in)
	if code != exitNotLinearizable || !strings.Contains(out, "line 1 ") || !strings.Contains(out, "line 3 ") {
		t.Fatalf("exit %d: %s", code, out)
	}
	history := []porcupine.Operation{
		{Call: 0, Return: 100, Output: span{8, 9}},
		{Call: 50, Return: 90, Output: span{5, 5}},
		{Call: 200, Return: 300, Output: span{7, 7}},
		{Call: 210, Return: 290, Output: span{20, 20}},
	}
	parts := partition(history)
	if len(parts) != 2 || len(parts[0]) != 2 || len(parts[1]) != 3 || parts[1][0].Output.(span).hi != 9 {
		t.Fatalf("partitions: %v", parts)
	}
}
