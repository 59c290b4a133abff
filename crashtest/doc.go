// Package crashtest proves hookgate's durability promise against the real
// binary, the way an operator would break it: it builds hookgate, runs
// signed Standard Webhooks load from many clients against the process, kills
// it with SIGKILL at random (seeded) moments, restarts it on the same data
// directory, and lets a faulty receiver refuse and drop deliveries. At the
// end it checks what a user relies on: every event answered with a 2xx was
// delivered, no event was accepted twice, and every delivery of one event
// carried the same Idempotency-Key. The package holds only tests; how to
// run them and what they showed is in docs/guarantees.md.
package crashtest
