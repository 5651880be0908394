"""Job modules that tests import into worker processes with -r."""
