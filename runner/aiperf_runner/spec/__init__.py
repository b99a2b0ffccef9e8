"""The one definition of AIPerf's graphs, FLOPs, event log, bundle, score and rules.

Imports neither torch nor Django: the service and `aiperf-runner verify` run without them.
"""

SPEC_VERSION = "2"
"""The log format this runner writes (spec/schema.py; docs/log-format.md, "Versions of the format")."""

SPEC_VERSIONS = ("1", "2")
"""Every log format ever released: the verifier reads each with its own schema."""
