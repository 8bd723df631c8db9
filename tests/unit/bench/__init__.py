"""Unit tests of the benchmarks (bench/)."""
