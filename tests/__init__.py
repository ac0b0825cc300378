"""The tests mirror the package: one folder per wing of src/tunefleet/.

A package (with one in each folder), so test modules may share a basename and worker
processes import a trainable by its module name, ``tests.<folder>.<module>``, through
the repository root the driver has on ``sys.path``.
"""
