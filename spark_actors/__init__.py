"""Spark Connect actors: the per-process session, the local server launcher and the rewrite jobs."""
