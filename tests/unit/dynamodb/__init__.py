"""Unit tests of aggregator.dynamodb."""
