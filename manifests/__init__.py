"""Manifest schemas, validation and the pod compiler."""
