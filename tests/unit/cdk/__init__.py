"""Unit tests of aggregator.cdk."""
