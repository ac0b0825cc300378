"""The driver: the controller's step loop and what it coordinates (private to tunefleet).

`experiment` assembles the parts and runs the `controller`; `resume` rebuilds a
stopped experiment from its store; `restart`, `decisions` and `objective_filter`
are the controller's helpers, each over only the data it needs.
"""
