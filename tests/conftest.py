"""Test configuration: the test-environment plugins."""

pytest_plugins = ["tests.testenv.docker"]
