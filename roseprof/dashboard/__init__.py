"""HTML dashboards: figures built from a stored run (figures.py), laid out into one offline file (html.py)."""
