package pgembed

// Test access to unexported helpers.
var (
	// Alive reports whether a process exists and is not a zombie.
	Alive = alive
	// StopServer stops a postmaster by pid and waits for it to exit.
	StopServer = stopServer
)
