package workerproc

// FastFlags are worker flags with short intervals, so that a settlement
// whose job was lost is resolved within seconds: the fault tests and the
// soak run use them. Append to them (a later flag wins).
func FastFlags(bankURL string) []string {
	return []string{
		"--listen", "127.0.0.1:0",
		"--bank-url", bankURL,
		"--pending-grace", "2s",
		"--job-timeout", "5s",
		"--rescue-after", "7s",
		"--lease", "6s",
		"--sweep-interval", "500ms",
		"--check-interval", "200ms",
		"--max-check-interval", "1s",
		"--fetch-poll-interval", "200ms",
		"--bank-timeout", "2s",
		"--shutdown-timeout", "6s",
		"--bank-concurrency", "8",
		"--db-max-conns", "10",
		"--log-format", "json",
	}
}
