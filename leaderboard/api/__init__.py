"""The REST API under /api/v1/ (router.py lists the endpoints)."""
