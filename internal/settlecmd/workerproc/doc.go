// Package workerproc starts and manages `settle worker` subprocesses: it
// starts one against a database with a clean environment, waits for its
// "settle worker: listening on URL" line, and stops, kills, signals or
// measures it afterwards. The demo, the benchmark, the fault and soak
// tests and the end-to-end tests all run their workers through it.
//
// It owns only the child process: its environment, its stdout (read for
// the listening line, then drained) and its stderr log file. It must never
// start anything but `settle worker`, never let the caller's DATABASE_URL or
// SETTLE_* settings reach the child unless asked to keep them, and never
// leave a process behind that its caller cannot stop: every Proc it returns
// is running, and the caller must Stop or Kill it.
package workerproc
