"""The README's and the docs' code, run as shown."""
