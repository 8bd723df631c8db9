"""Unit tests of aggregator.cli."""
