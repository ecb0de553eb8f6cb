// Package failovertest proves settle's high availability (DESIGN.md section
// 17) on a real pg_auto_failover formation (internal/testsupport/hatest): two `settle
// worker` processes connected with a multi-host DATABASE_URL, a producer
// streaming events with redeliveries against a faulty fakebank, and the
// primary's machine killed mid-stream, then the promoted standby's too once
// the old primary has rejoined. It checks the exactly-once invariants
// afterwards (audit.CheckInvariants) and reports the 503 answers and the
// time without a primary of each failover.
//
// It holds tests only.
package failovertest
