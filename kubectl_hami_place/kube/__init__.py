"""The one layer that talks to the Kubernetes API; the CLI and the webhook call only this."""
