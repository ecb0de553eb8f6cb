//go:build !linux

package workerproc

import "syscall"

// sysProcAttr returns no attributes outside Linux: there is no Pdeathsig.
func sysProcAttr(bool) *syscall.SysProcAttr { return nil }
