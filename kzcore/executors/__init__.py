"""Where candidates run: the local worker pool here; other executors register as plugins."""
