"""Ray Tune's result keys (``ray.tune.result``): the names of what every result holds.

    from tunefleet.result import TRAINING_ITERATION   # was: from ray.tune.result import ...

    tuner = tune.Tuner(train, run_config=tune.RunConfig(stop={TRAINING_ITERATION: 10}))

Only the keys tunefleet fills in or honours are here; each means what it means in Ray
Tune. The trial's session sets them on every `report()` (see `session.py`).
"""

TRAINING_ITERATION = "training_iteration"  # reports so far, counting from a restore's
TIME_THIS_ITER_S = "time_this_iter_s"  # seconds since the previous report
TIME_TOTAL_S = "time_total_s"  # seconds of training, across restores
TIME_SINCE_RESTORE = "time_since_restore"  # seconds since this attempt started
ITERATIONS_SINCE_RESTORE = "iterations_since_restore"
TIMESTAMP = "timestamp"  # seconds since the epoch, as an int
TRIAL_ID = "trial_id"
PID = "pid"  # the process the trial runs in
DONE = "done"  # True: the trial is finished (a result may set it to end the trial)
# True in a class trainable's step() result, or set by a callback's on_trial_result: a
# checkpoint is taken (class trainables; a function trainable checkpoints when it reports one)
SHOULD_CHECKPOINT = "should_checkpoint"
DEFAULT_METRIC = "_metric"  # the key of a number a function trainable returns
# the per-trial files that the logger callbacks write (JsonLoggerCallback, CSVLoggerCallback)
EXPR_PARAM_FILE = "params.json"
EXPR_PARAM_PICKLE_FILE = "params.pkl"
EXPR_RESULT_FILE = "result.json"
EXPR_PROGRESS_FILE = "progress.csv"
HOSTNAME = "hostname"  # the machine the trial runs on (with DATE and NODE_IP, every result)
NODE_IP = "node_ip"
DATE = "date"  # local time of the result, "%Y-%m-%d_%H-%M-%S"
# Reported by the trainable, the increments make the running totals (only then, as in Ray):
TIMESTEPS_THIS_ITER = "timesteps_this_iter"
TIMESTEPS_TOTAL = "timesteps_total"  # the sum of timesteps_this_iter (unless reported)
TIMESTEPS_SINCE_RESTORE = "timesteps_since_restore"
EPISODES_THIS_ITER = "episodes_this_iter"
EPISODES_TOTAL = "episodes_total"
# tunefleet's own (not Ray's): the trial's resource usage, a nested dict in every result
# (flattened: "resources/cpu_percent", ...), filled on the trial's side (backends/_usage.py)
RESOURCES = "resources"
RESOURCES_CPU_PERCENT = "cpu_percent"  # the process tree's CPU since the last report (top's %)
RESOURCES_PEAK_RSS_MB = "peak_rss_mb"  # the tree's peak RSS in this attempt, MiB
RESOURCES_GPU_PEAK_MB = "gpu_peak_mb"  # torch's peak allocated GPU memory, when CUDA is on
RESOURCES_GPU_TOTAL_MB = "gpu_total_mb"  # that GPU's memory (with gpu_peak_mb)
RESOURCES_MEMORY_LIMIT_MB = "memory_limit_mb"  # the trial's resources["memory"], if any

# The keys a result gets filled in without the trainable reporting them, as Ray Tune's
# tuple (its members and order; Ray lists TIME_TOTAL_S twice). `repr(Result)` and
# `repr(ResultGrid)` leave them out of the metrics they show.
AUTO_RESULT_KEYS = (
    TRAINING_ITERATION,
    TIME_TOTAL_S,
    EPISODES_TOTAL,
    TIMESTEPS_TOTAL,
    NODE_IP,
    HOSTNAME,
    PID,
    TIME_TOTAL_S,
    TIME_THIS_ITER_S,
    TIMESTAMP,
    DATE,
    TIME_SINCE_RESTORE,
    TIMESTEPS_SINCE_RESTORE,
    ITERATIONS_SINCE_RESTORE,
    "config",
)

__all__ = [
    "AUTO_RESULT_KEYS",
    "DATE",
    "DEFAULT_METRIC",
    "DONE",
    "EPISODES_THIS_ITER",
    "EPISODES_TOTAL",
    "EXPR_PARAM_FILE",
    "EXPR_PARAM_PICKLE_FILE",
    "EXPR_PROGRESS_FILE",
    "EXPR_RESULT_FILE",
    "HOSTNAME",
    "ITERATIONS_SINCE_RESTORE",
    "NODE_IP",
    "PID",
    "SHOULD_CHECKPOINT",
    "TIMESTAMP",
    "TIMESTEPS_SINCE_RESTORE",
    "TIMESTEPS_THIS_ITER",
    "TIMESTEPS_TOTAL",
    "TIME_SINCE_RESTORE",
    "TIME_THIS_ITER_S",
    "TIME_TOTAL_S",
    "TRAINING_ITERATION",
    "TRIAL_ID",
]
