"""The placement admission webhook and its read-only cluster API."""
