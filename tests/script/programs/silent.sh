#!/usr/bin/env bash
# Reports once, then works for a long time without reporting (a stop must still end it).
echo $$ > pid.txt
echo 'tunefleet-report: {"loss": 1}'
sleep 600
