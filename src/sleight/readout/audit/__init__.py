"""Readout audit: the six checks and the interventions over one reading of a scored position."""
