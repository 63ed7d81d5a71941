"""The pure domain model shared by the plugin and the webhook: no I/O, plain data in and out."""
