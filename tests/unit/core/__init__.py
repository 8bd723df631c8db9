"""Unit tests of aggregator.core."""
