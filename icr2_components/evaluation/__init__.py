"""Evaluation: metrics, evaluation runs and reports. Import the modules directly (no eager imports here)."""
