"""The AIPerf service's client: saved server and token, requests with retries, chunked uploads."""
