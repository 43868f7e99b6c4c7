"""Damaged, hostile and crashing inputs against every consumer; the fault tables here are
the ones scripts/reliability_report.py runs for docs/reliability.md."""
