"""The runtime: stream processing (processor), stream filters, and the local stream runner."""
