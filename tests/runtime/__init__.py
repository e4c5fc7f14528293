"""browserworker/runtime: running runs, crash and resume, recovery rules, the step loop (also on fakes), the browser, login sessions."""
