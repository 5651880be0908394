"""The worker side: fetchers, processors, managers, the launcher with its heartbeat, the poller of scheduled jobs
and retries, the retry rules and the dead set (Sidekiq's components, one module each)."""
