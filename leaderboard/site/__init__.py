"""The public web pages of the service (docs/site.md)."""
