"""Audits of published scorers: presets naming their sources, text parsers, and the scan report."""
