"""What a person sees of a run: the live table, Ray Tune's reporters, experiment snapshots.

Private to tunefleet; users meet `CLIReporter` and friends as `tunefleet.CLIReporter`.
"""
