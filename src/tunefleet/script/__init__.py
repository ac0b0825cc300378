"""Tuning a program in any language (`tunefleet run`): the trainable, the child, the space.

Private to tunefleet; the command is `tunefleet run` (see `tunefleet.cli.script`).
"""
