// Package settletest is settle's general test support, at the bottom of the
// import graph: a buffer several goroutines may share and the one manual
// clock. Nothing in settle's binaries may import it.
package settletest
