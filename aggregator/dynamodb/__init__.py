"""The DynamoDB layer: write protocols, update expressions, queries, tables, dead letters."""
