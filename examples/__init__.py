"""Example durable objects, used by the demo and by the tests."""
