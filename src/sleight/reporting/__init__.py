"""Sleight of Word results: tables (Markdown/CSV/LaTeX), plots, and the static HTML site.

``write_report(run_dirs, out)`` in :mod:`sleight.reporting.report` is the entry point; the
tables are pure functions of the stored runs (:mod:`sleight.reporting.tables`).
"""
