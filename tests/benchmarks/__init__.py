"""The benchmarks (benchmarks/) measure what the kit really does."""
