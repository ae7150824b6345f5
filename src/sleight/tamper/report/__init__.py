"""Sleight of Word results: tables, exports, plots, the static leaderboard and trial viewer."""
