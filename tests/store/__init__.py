"""browserworker/store: the store contract on both stores, its flat surface, each dialect's mechanics, faults, limits, approvals."""
