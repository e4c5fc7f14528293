"""browserworker/store: the store contract on both stores, each dialect's mechanics, faults, limits, approvals."""
