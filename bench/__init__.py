"""kiq's benchmark harness: drain, push and latency of kiq, Ruby Sidekiq and the Python peers (docs/bench.md)."""
