//go:build !linux

package demo

import "syscall"

// childAttr returns no special attributes outside Linux.
func childAttr() *syscall.SysProcAttr { return nil }
