"""The commit engine: workers that carry approved operations out (PRODUCT.md,
"Propose-then-commit"): claim with a lease and a fencing epoch, record the intent,
re-check cancel and precondition, execute with the idempotency key outside any
transaction, verify by re-reading the target, record the result — or run the
rollback plan."""
