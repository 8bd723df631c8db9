"""Unit tests of aggregator.dev."""
