"""Development data, not part of the service: generated run directories and demo results.

- `devdata.runfactory`: synthetic, contract-conform run directories of any size (tests, benches).
- `devdata.reports`: verification reports that `aiperf_runner.spec.verify` gives such runs, varied.
- `devdata.demo`: a database filled with marked demo results (`manage.py aiperf_demo_data`,
  bench/site_latency.py, screenshots).
"""
