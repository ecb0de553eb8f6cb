package workerproc

import "syscall"

// sysProcAttr makes the kernel send the worker SIGTERM when its parent
// dies, if dieWithParent, so that a killed parent never leaves a worker
// behind. (Strictly, when the OS thread that started it exits; the Go
// runtime ends threads only of goroutines that lock one and exit.)
func sysProcAttr(dieWithParent bool) *syscall.SysProcAttr {
	if !dieWithParent {
		return nil
	}
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
