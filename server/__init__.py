"""The AIPerf service\x27s Django project."""
