package demo

import "syscall"

// childAttr makes the kernel stop the worker when the demo dies, however it
// dies, so a killed demo never leaves a worker behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
