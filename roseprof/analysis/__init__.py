"""Analyses: each takes parsed data and returns data (numpy arrays, dicts); nothing here renders."""
