"""The one definition of AIPerf's graphs, FLOPs, event log, bundle, score and rules.

Imports neither torch nor Django: the service and `aiperf-runner verify` run without them.
"""

SPEC_VERSION = "1"
