"""SQL files: numbered migrations and named queries."""
