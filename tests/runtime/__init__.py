"""browserworker/runtime: running runs, crash and resume, recovery rules, the browser, login sessions."""
