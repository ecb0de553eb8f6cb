package intake

// SetGroupHooks makes s call queued with the number of single events
// waiting each time one is queued for a shared transaction, and committing
// with the size of each group as it commits (s must have GroupCommit; set
// before any Submit).
func SetGroupHooks(s *Service, queued, committing func(int)) {
	s.group.hooks = groupHooks{queued: queued, committing: committing}
}
