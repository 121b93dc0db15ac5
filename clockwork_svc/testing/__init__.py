"""Support for tests that must run inside Clockwork's own processes."""
