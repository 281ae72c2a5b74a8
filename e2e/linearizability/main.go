// Command kubeflake-lincheck checks a recorded history of ID requests against the
// sequential specification of a strict sequence: every operation takes a run of values
// [lo, hi] (one value: lo == hi) that lies above every value taken before it, so values
// are strictly increasing in some order that respects real time, and never reused.
//
// The check is porcupine's (github.com/anishathalye/porcupine): it searches for a
// linearization of the history under the model "state = the largest value returned so
// far; an operation with output [lo, hi] is legal iff lo > state, and then the state is
// hi". Operations are closed intervals [call, return]: two operations whose intervals
// touch are concurrent and may be ordered either way.
//
// Input (a file, or standard input when the file is "-" or not given): one JSON object
// per line,
//
//	{"client":0,"call":1200,"return":3400,"lo":42,"hi":44}
//
// client: a small non-negative integer (one per client thread, for the visualization);
// call, return: nanoseconds from one monotonic clock; lo <= hi: the first and last value
// of the operation. Empty lines are skipped.
//
// Before porcupine runs, a quick O(n log n) pass checks the same property directly and
// names a witness if there is one: two operations sharing a value, or two operations A
// and B where A returned before B was called and B's values are not above A's.
//
// Exit status and last line of standard output:
//
//	0  "linearizable: N operations"
//	1  "NOT linearizable: ..." (the witness lines come before it)
//	2  bad input or bad flags (message on standard error)
//	3  "unknown: ..." porcupine did not finish within -timeout, or its search grew
//	   beyond -max-memory-mib
//	4  "checkers disagree: ..." porcupine and the quick pass came to different
//	   verdicts, which is a bug in one of them
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
)

const (
	exitLinearizable    = 0
	exitNotLinearizable = 1
	exitBadInput        = 2
	exitUnknown         = 3
	exitDisagree        = 4
)

// record is one input line; pointers tell a missing field from a zero.
type record struct {
	Client *int    `json:"client"`
	Call   *int64  `json:"call"`
	Return *int64  `json:"return"`
	Lo     *uint64 `json:"lo"`
	Hi     *uint64 `json:"hi"`
}

// op is one checked operation: its line number (from 1) and its fields.
type op struct {
	line   int
	client int
	call   int64
	ret    int64
	lo, hi uint64
}

func (o op) String() string {
	values := fmt.Sprintf("%d", o.lo)
	if o.hi != o.lo {
		values = fmt.Sprintf("[%d, %d]", o.lo, o.hi)
	}
	return fmt.Sprintf("line %d (client %d, call %d ns, return %d ns): %s", o.line, o.client, o.call, o.ret, values)
}

// span is the model's output of one operation.
type span struct{ lo, hi uint64 }

// state is the model's state: the largest value returned so far, if any.
type state struct {
	any bool
	max uint64
}

var model = porcupine.Model{
	Partition: partition,
	Init:      func() interface{} { return state{} },
	Step: func(s, _, output interface{}) (bool, interface{}) {
		st, out := s.(state), output.(span)
		if st.any && out.lo <= st.max {
			return false, st
		}
		return true, state{any: true, max: out.hi}
	},
	Equal: func(a, b interface{}) bool { return a.(state) == b.(state) },
	Hash: func(s interface{}) uint64 {
		st := s.(state)
		if !st.any {
			return 0
		}
		return st.max*0x9e3779b97f4a7c15 + 1
	},
	DescribeOperation: func(_, output interface{}) string {
		out := output.(span)
		if out.lo == out.hi {
			return fmt.Sprintf("id -> %d", out.lo)
		}
		return fmt.Sprintf("ids -> [%d, %d]", out.lo, out.hi)
	},
	DescribeState: func(s interface{}) string {
		st := s.(state)
		if !st.any {
			return "none yet"
		}
		return fmt.Sprintf("max %d", st.max)
	},
}

// partition cuts the history where no operation is in flight (every operation before the
// cut returned strictly before every operation after it was called), so that porcupine
// searches each stretch on its own; without cuts its search over thousands of overlapping
// operations grows beyond memory. Each stretch after the first also gets the operation
// with the highest value of the stretch before it: that one precedes the whole stretch in
// real time, so the stretch is legal only if all its values are above it. Hence the
// history is linearizable iff every partition is: a linearization restricted to a subset
// is one of the subset, and the stretches' linearizations, joined in order, are one of
// the whole (each stretch's values start above the previous stretch's highest).
func partition(history []porcupine.Operation) [][]porcupine.Operation {
	ops := append([]porcupine.Operation(nil), history...)
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	var parts [][]porcupine.Operation
	var current []porcupine.Operation
	var lastReturn int64
	for _, o := range ops {
		if len(current) > 0 && o.Call > lastReturn {
			parts = append(parts, current)
			current = []porcupine.Operation{highest(current)}
		}
		if len(current) == 0 || o.Return > lastReturn {
			lastReturn = o.Return
		}
		current = append(current, o)
	}
	if len(current) > 0 {
		parts = append(parts, current)
	}
	return parts
}

// highest returns the operation with the highest value of a stretch.
func highest(ops []porcupine.Operation) porcupine.Operation {
	best := ops[0]
	for _, o := range ops[1:] {
		if o.Output.(span).hi > best.Output.(span).hi {
			best = o
		}
	}
	return best
}

func readHistory(r io.Reader) ([]op, error) {
	var ops []op
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 64*1024), 1024*1024)
	line := 0
	for scanner.Scan() {
		line++
		text := strings.TrimSpace(scanner.Text())
		if text == "" {
			continue
		}
		var rec record
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			return nil, fmt.Errorf("line %d: %v", line, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("line %d: more than one JSON value", line)
		}
		if rec.Client == nil || rec.Call == nil || rec.Return == nil || rec.Lo == nil || rec.Hi == nil {
			return nil, fmt.Errorf("line %d: every field is required: client, call, return, lo, hi", line)
		}
		o := op{line: line, client: *rec.Client, call: *rec.Call, ret: *rec.Return, lo: *rec.Lo, hi: *rec.Hi}
		switch {
		case o.client < 0:
			return nil, fmt.Errorf("line %d: client %d is negative", line, o.client)
		case o.ret < o.call:
			return nil, fmt.Errorf("line %d: return %d is before call %d", line, o.ret, o.call)
		case o.hi < o.lo:
			return nil, fmt.Errorf("line %d: hi %d is below lo %d", line, o.hi, o.lo)
		}
		ops = append(ops, o)
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %v", line+1, err)
	}
	return ops, nil
}

// quickWitness checks the property without a search. Two conditions, both necessary:
// an operation called after another returned has values above the other's (a sweep in
// call order, keeping the operation with the highest hi among those that returned
// strictly before the current call: closed intervals, touching is concurrent); and no
// two runs share a value or interleave (ordered by lo, each starts above the previous
// hi). Together they are sufficient: with disjoint runs the order by lo is a
// linearization, and it respects real time. Returns the witness lines, empty when the
// history is linearizable.
func quickWitness(ops []op) []string {
	byCall := append([]op(nil), ops...)
	sort.Slice(byCall, func(i, j int) bool { return byCall[i].call < byCall[j].call })
	byRet := append([]op(nil), ops...)
	sort.Slice(byRet, func(i, j int) bool { return byRet[i].ret < byRet[j].ret })
	var highest *op
	next := 0
	for i := range byCall {
		b := byCall[i]
		for next < len(byRet) && byRet[next].ret < b.call {
			if highest == nil || byRet[next].hi > highest.hi {
				highest = &byRet[next]
			}
			next++
		}
		if highest != nil && b.lo <= highest.hi {
			return []string{
				"real-time order violated: the second operation was called after the first returned, yet its values are not above the first's:",
				"  " + highest.String(),
				"  " + b.String(),
			}
		}
	}
	byLo := append([]op(nil), ops...)
	sort.Slice(byLo, func(i, j int) bool { return byLo[i].lo < byLo[j].lo })
	for i := 1; i < len(byLo); i++ {
		if a, b := byLo[i-1], byLo[i]; b.lo <= a.hi {
			what := "these runs share values or interleave (concurrent, but no order puts one above the other):"
			if a.lo == a.hi && b.lo == b.hi {
				what = fmt.Sprintf("value %d was returned twice:", b.lo)
			}
			return []string{what, "  " + a.String(), "  " + b.String()}
		}
	}
	return nil
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("kubeflake-lincheck", flag.ContinueOnError)
	flags.SetOutput(stderr)
	timeout := flags.Duration("timeout", 60*time.Second, "give porcupine's search up after this long (exit 3)")
	maxMemory := flags.Int("max-memory-mib", 2048, "give porcupine's search up when the heap grows beyond this many MiB (exit 3)")
	html := flags.String("html", "", "write porcupine's HTML visualization of the history to this file when it is not linearizable")
	flags.Usage = func() {
		fmt.Fprintln(stderr, "usage: kubeflake-lincheck [-timeout 60s] [-html out.html] [history.jsonl | -]")
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		return exitBadInput
	}
	if flags.NArg() > 1 || *timeout <= 0 || *maxMemory <= 0 {
		flags.Usage()
		return exitBadInput
	}
	in := stdin
	if path := flags.Arg(0); path != "" && path != "-" {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(stderr, "kubeflake-lincheck:", err)
			return exitBadInput
		}
		defer f.Close()
		in = f
	}
	ops, err := readHistory(in)
	if err != nil {
		fmt.Fprintln(stderr, "kubeflake-lincheck: bad input:", err)
		return exitBadInput
	}

	history := make([]porcupine.Operation, len(ops))
	for i, o := range ops {
		history[i] = porcupine.Operation{ClientId: o.client, Call: o.call, Return: o.ret, Output: span{o.lo, o.hi}}
	}
	// The search keeps every (set of operations, state) pair it has seen; a history with
	// many concurrent operations can make that grow by gigabytes. Stop it before it does.
	memoryExceeded := watchMemory(uint64(*maxMemory) << 20)
	started := time.Now()
	var result porcupine.CheckResult
	var info porcupine.LinearizationInfo
	if *html != "" {
		result, info = porcupine.CheckOperationsVerbose(model, history, *timeout)
	} else {
		result = porcupine.CheckOperationsTimeout(model, history, *timeout)
	}
	took := time.Since(started).Round(time.Millisecond)
	witness := quickWitness(ops)

	switch {
	case memoryExceeded.Load():
		fmt.Fprintf(stdout, "unknown: porcupine's search grew beyond %d MiB (%d operations)\n", *maxMemory, len(ops))
		return exitUnknown
	case result == porcupine.Unknown:
		fmt.Fprintf(stdout, "unknown: porcupine did not finish within %v (%d operations)\n", *timeout, len(ops))
		return exitUnknown
	case result == porcupine.Ok && witness == nil:
		fmt.Fprintf(stdout, "linearizable: %d operations (porcupine: %d stretches without an operation in flight between them, %v)\n",
			len(ops), len(partition(history)), took)
		return exitLinearizable
	case result == porcupine.Illegal && witness != nil:
		for _, l := range witness {
			fmt.Fprintln(stdout, l)
		}
		if *html != "" {
			if err := porcupine.VisualizePath(model, info, *html); err != nil {
				fmt.Fprintln(stderr, "kubeflake-lincheck: visualization:", err)
			} else {
				fmt.Fprintln(stdout, "visualization:", *html)
			}
		}
		fmt.Fprintf(stdout, "NOT linearizable: %d operations (porcupine found no linearization, %v)\n", len(ops), took)
		return exitNotLinearizable
	default:
		for _, l := range witness {
			fmt.Fprintln(stdout, l)
		}
		fmt.Fprintf(stdout, "checkers disagree: porcupine says %v, the quick pass found %d witness lines (%d operations)\n",
			verdict(result), len(witness), len(ops))
		return exitDisagree
	}
}

// watchMemory ends the process with exit 3 once the heap exceeds limit bytes; the
// returned flag is set just before (so a verdict racing with it reports unknown).
func watchMemory(limit uint64) *atomic.Bool {
	exceeded := new(atomic.Bool)
	go func() {
		var stats runtime.MemStats
		for {
			time.Sleep(200 * time.Millisecond)
			runtime.ReadMemStats(&stats)
			if stats.HeapAlloc > limit {
				exceeded.Store(true)
				fmt.Printf("unknown: porcupine's search grew beyond %d MiB\n", limit>>20)
				os.Exit(exitUnknown)
			}
		}
	}()
	return exceeded
}

func verdict(r porcupine.CheckResult) string {
	switch r {
	case porcupine.Ok:
		return "linearizable"
	case porcupine.Illegal:
		return "not linearizable"
	default:
		return "unknown"
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
