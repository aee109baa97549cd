"""Rewrite actions (merge, sort, compact_deletes, respec): one lifecycle (lifecycle.py), one verify ladder
(verify.py), and per kind only its planning and its rewrite of one group (merge.py, compact.py)."""
