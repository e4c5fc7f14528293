"""The test suite, one folder per concern of the package (docs/layout.md: The test suite)."""
