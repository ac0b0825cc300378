"""Modules the tests share: trainables (imported by name in worker processes too),
process checks and the checkout's paths."""
