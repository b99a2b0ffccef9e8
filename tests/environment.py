"""The environment every test runs in, set before Django reads its settings (`-p tests.environment` in
pyproject.toml: a plugin loads before pytest-django configures Django, a conftest after).

The service approves registered systems by hand by default; tests whose subject is not approval (and the
services they start, which inherit this environment) approve at once. test_system_approval and the e2e
trust tests set `manual` and approve with the maintainer's command.
"""

import os

os.environ.setdefault("AIPERF_SYSTEM_APPROVAL", "auto")
