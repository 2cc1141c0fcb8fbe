"""`roseprof live`: a load joined to a live server's decode steps (join.py)."""
