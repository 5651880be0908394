"""Framework integrations and HTTP endpoints for kiq."""
