"""The AIPerf leaderboard: sites, keys, systems, submissions, results, editions."""
