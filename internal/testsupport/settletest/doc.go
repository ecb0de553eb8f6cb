// Package settletest is settle's general test support, at the bottom of the
// import graph: a buffer several goroutines may share, the one manual
// clock, and the heap's peak during a measurement (HeapPeak). Nothing in
// settle's binaries may import it.
package settletest
