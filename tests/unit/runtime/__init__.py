"""Unit tests of what runs in Lambda: aggregator.runtime and aggregator.handler."""
