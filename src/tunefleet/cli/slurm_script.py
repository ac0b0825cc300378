"""The bash text of the sbatch script that `tunefleet slurm` writes (see `slurm`).

`TEMPLATE` has ``@@NAME@@`` markers that `slurm.render_sbatch` fills in; `NODE_IP` is a
shell function defined both in the script and in each node's srun step.
"""

# The address other nodes reach a node at; defined in the script and in each node's step.
NODE_IP = r"""tf_node_ip() {
    # The --interface's IPv4 address; else the first IPv4 address that is not
    # loopback, from `hostname --ip-address` (often 127.0.x.1 only) then `hostname -I`.
    local addr
    if [ -n "$TF_INTERFACE" ]; then
        addr=$(ip -o -4 addr show dev "$TF_INTERFACE" 2>/dev/null |
            awk '{sub("/.*", "", $4); print $4; exit}')
        if [ -n "$addr" ]; then echo "$addr"; return 0; fi
        echo "no IPv4 address on interface $TF_INTERFACE (--interface) on $(hostname);" \
            "its interfaces: $(ls /sys/class/net 2>/dev/null | tr '\n' ' ')" >&2
        return 1
    fi
    for addr in $(hostname --ip-address 2>/dev/null) $(hostname -I 2>/dev/null); do
        case "$addr" in
            127.* | *:*) ;;
            *) echo "$addr"; return 0 ;;
        esac
    done
    echo "no IPv4 address other than loopback on $(hostname) (hostname --ip-address," \
        "hostname -I); use --interface, or set TUNEFLEET_HEAD_IP" >&2
    return 1
}"""

TEMPLATE = r"""#!/bin/bash
@@SBATCH@@
#
# Written by `tunefleet slurm` (tunefleet @@VERSION@@). It starts a Ray head on this node
# (the first of the allocation) and a Ray worker on each other node, waits until the
# head answers and the nodes have joined, then runs the experiment with RAY_ADDRESS set:
# tune.RunConfig(backend="ray", ray_init={"address": "auto"}) joins this cluster.
# Before the time limit (or on `scancel --batch --signal=TERM`) the experiment gets
# SIGINT (tunefleet winds down, keeping its results) and --grace seconds; then the Ray
# nodes are stopped.

# -- setup (--setup) --------------------------------------------------------------------------
@@SETUP@@
# -- end of setup -----------------------------------------------------------------------------

set -euo pipefail

TF_PORT=@@PORT@@  # the Ray head's port
TF_TEMP_DIR=@@TEMP_DIR@@  # Ray's temp dir on each node; "": Ray's default
TF_INTERFACE=@@INTERFACE@@  # the network interface Ray's addresses are on; "": the host's
TF_GPUS_PER_NODE=@@GPUS@@  # GPUs asked per node, used when the step shows none
TF_CPUS_PER_NODE=@@CPUS@@  # CPUs per Ray node; "": what Slurm gave each node
TF_MIN_NODES=@@MIN_NODES@@  # Ray nodes that must join before the experiment; "": all
TF_HEAD_TIMEOUT=@@HEAD_TIMEOUT@@  # seconds for the head to answer
TF_JOIN_TIMEOUT=@@JOIN_TIMEOUT@@  # seconds for the nodes to join
TF_GRACE=@@GRACE@@  # seconds the experiment has to wind down when the job is stopped
TF_PYTHON=@@PYTHON@@  # the Python with ray, to count the nodes
TF_RAY_STOP=@@RAY_STOP@@  # 1: `ray stop` on this node at the end, a safety net
TF_RAY_ARGS=(@@RAY_ARGS@@)  # more `ray start` options, every node
TF_HEAD_RAY_ARGS=(@@HEAD_RAY_ARGS@@)  # ... and the head's own
TF_COMMAND=@@COMMAND@@

TF_STEP_PIDS=()  # the srun steps that run Ray nodes
TF_CHILD=""  # a check being waited for
TF_EXP_PID=""  # the experiment (its own process group)

tf_log() { printf '[tunefleet %(%H:%M:%S)T] %s\n' -1 "$*"; }
tf_fail() {
    printf '[tunefleet %(%H:%M:%S)T] ERROR: %s\n' -1 "$*" >&2
    exit 1
}

@@NODE_IP@@

tf_gone_within() {  # SECONDS PID...: whether they all end within that time
    local deadline=$((SECONDS + $1)) pid alive
    shift
    while :; do
        alive=0
        for pid in "$@"; do
            if kill -0 -- "$pid" 2>/dev/null; then alive=1; fi
        done
        if [ "$alive" = 0 ]; then return 0; fi
        if [ "$SECONDS" -ge "$deadline" ]; then return 1; fi
        sleep 0.5
    done
}

tf_run() {  # CMD...: run it in the background and wait, so signals are handled at once
    local status=0
    "$@" &
    TF_CHILD=$!
    wait "$TF_CHILD" || status=$?
    TF_CHILD=""
    return "$status"
}

tf_on_signal() {  # NAME NUMBER
    trap '' TERM INT HUP
    tf_log "received SIG$1"
    if [ -n "$TF_CHILD" ]; then kill -TERM "$TF_CHILD" 2>/dev/null || true; fi
    if [ -n "$TF_EXP_PID" ] && kill -0 -- "-$TF_EXP_PID" 2>/dev/null; then
        if [ "$TF_GRACE" -gt 0 ]; then
            tf_log "asking the experiment to stop (SIGINT, as Ctrl-C); it has ${TF_GRACE}s"
            kill -INT -- "-$TF_EXP_PID" 2>/dev/null || true
        fi
        if ! tf_gone_within "$TF_GRACE" "-$TF_EXP_PID"; then
            tf_log "the experiment is still running: SIGTERM"
            kill -TERM -- "-$TF_EXP_PID" 2>/dev/null || true
            tf_gone_within 10 "-$TF_EXP_PID" || kill -KILL -- "-$TF_EXP_PID" 2>/dev/null || true
        fi
    fi
    exit $((128 + $2))
}

tf_on_exit() {
    local status=$?
    trap - EXIT
    trap '' TERM INT HUP
    # whatever the experiment left running in its process group
    if [ -n "$TF_EXP_PID" ]; then kill -TERM -- "-$TF_EXP_PID" 2>/dev/null || true; fi
    if [ "${#TF_STEP_PIDS[@]}" -gt 0 ]; then
        # SIGTERM to srun reaches `ray start --block`, which stops its node's processes
        tf_log "stopping the Ray nodes"
        kill -TERM "${TF_STEP_PIDS[@]}" 2>/dev/null || true
        if ! tf_gone_within 30 "${TF_STEP_PIDS[@]}"; then
            tf_log "Ray nodes still running after 30s: SIGKILL"
            kill -KILL "${TF_STEP_PIDS[@]}" 2>/dev/null || true
        fi
        if [ "$TF_RAY_STOP" = 1 ]; then ray stop >/dev/null 2>&1 || true; fi
    fi
    exit "$status"
}

trap tf_on_exit EXIT
trap 'tf_on_signal TERM 15' TERM
trap 'tf_on_signal INT 2' INT
trap 'tf_on_signal HUP 1' HUP

# What runs in each node's srun step: `ray start --block` with the step's CPUs and GPUs.
TF_NODE_SCRIPT=$(
    cat <<'TF_NODE_EOF'
set -eo pipefail
role=$1
cpus=$2
shift 2
@@NODE_IP@@
gpus=0
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ] && [ "$CUDA_VISIBLE_DEVICES" != NoDevFiles ]; then
    IFS=, read -ra ids <<<"$CUDA_VISIBLE_DEVICES"
    gpus=${#ids[@]}
elif [ -n "${SLURM_GPUS_ON_NODE:-}" ]; then
    gpus=$SLURM_GPUS_ON_NODE
elif [ -n "$TF_GPUS_PER_NODE" ]; then
    gpus=$TF_GPUS_PER_NODE
fi
args=(--num-cpus="$cpus" --num-gpus="$gpus" --disable-usage-stats --block)
if [ -n "$TF_TEMP_DIR" ]; then args+=(--temp-dir="$TF_TEMP_DIR"); fi
if [ "$role" = head ]; then
    echo "[tunefleet] $(hostname): ray start --head, $cpus CPUs, $gpus GPUs"
    exec ray start --head --node-ip-address="$TF_HEAD_IP" --port="$TF_PORT" "${args[@]}" "$@"
fi
if [ -n "$TF_INTERFACE" ]; then
    ip=$(tf_node_ip)
    args+=(--node-ip-address="$ip")
fi
echo "[tunefleet] $(hostname): ray start (worker), $cpus CPUs, $gpus GPUs"
exec ray start --address="$TF_HEAD_ADDRESS" "${args[@]}" "$@"
TF_NODE_EOF
)

tf_cpus_of() {  # INDEX: the CPUs of the allocation's INDEX-th node
    if [ -n "$TF_CPUS_PER_NODE" ]; then echo "$TF_CPUS_PER_NODE"; return; fi
    if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then echo "$SLURM_CPUS_PER_TASK"; return; fi
    # SLURM_JOB_CPUS_PER_NODE gives each node's CPUs in node order, e.g. "72(x2),36"
    local first=0 part count repeat parts=()
    IFS=, read -ra parts <<<"${SLURM_JOB_CPUS_PER_NODE:-}"
    for part in ${parts[@]+"${parts[@]}"}; do
        count=${part%%(*}
        repeat=1
        if [[ $part == *"(x"*")" ]]; then
            repeat=${part#*(x}
            repeat=${repeat%)}
        fi
        if [ "$1" -lt $((first + repeat)) ]; then echo "$count"; return; fi
        first=$((first + repeat))
    done
    echo "${SLURM_CPUS_ON_NODE:-1}"
}

tf_start_node() {  # ROLE NODE CPUS
    local args=(${TF_RAY_ARGS[@]+"${TF_RAY_ARGS[@]}"})
    if [ "$1" = head ]; then args+=(${TF_HEAD_RAY_ARGS[@]+"${TF_HEAD_RAY_ARGS[@]}"}); fi
    srun --nodes=1 --ntasks=1 --nodelist="$2" --cpus-per-task="$3" --export=ALL \
        bash -c "$TF_NODE_SCRIPT" tunefleet-node "$1" "$3" ${args[@]+"${args[@]}"} &
    TF_STEP_PIDS+=("$!")
}

tf_wait_head() {
    local deadline=$((SECONDS + TF_HEAD_TIMEOUT)) left answer=""
    while :; do
        left=$((deadline - SECONDS))
        if [ "$left" -gt 10 ]; then left=10; elif [ "$left" -lt 1 ]; then left=1; fi
        if answer=$(timeout "$left" ray health-check --address "$TF_HEAD_ADDRESS" 2>&1); then
            return 0
        fi
        if ! kill -0 "$TF_HEAD_PID" 2>/dev/null; then
            tf_fail "the Ray head on $TF_HEAD_NODE (srun ... ray start --head) exited before it" \
                "answered at $TF_HEAD_ADDRESS; its output is above"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            tf_fail "the Ray head at $TF_HEAD_ADDRESS did not answer within ${TF_HEAD_TIMEOUT}s" \
                "(--head-timeout); ray health-check said: ${answer##*$'\n'}"
        fi
        sleep 2
    done
}

# Counts the alive Ray nodes until WANT have joined: 0 when they have, 3 on timeout.
TF_JOIN_CHECK='
import logging, sys, time
import ray
address, want, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
deadline = time.monotonic() + timeout
while True:  # the head answers before its raylet is there to connect to
    try:
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
        break
    except Exception as exc:
        ray.shutdown()
        if time.monotonic() >= deadline:
            sys.exit(f"[tunefleet] cannot connect to the Ray head at {address}: {exc}")
        time.sleep(2)
seen = -1
while True:
    alive = [n for n in ray.nodes() if n.get("Alive")]
    if len(alive) != seen:
        seen = len(alive)
        print(f"[tunefleet] {seen} of {want} Ray nodes have joined", flush=True)
    if seen >= want:
        break
    if time.monotonic() >= deadline:
        hosts = ", ".join(sorted(str(n.get("NodeManagerHostname")) for n in alive))
        print(f"[tunefleet] joined: {hosts}", flush=True)
        sys.exit(3)
    time.sleep(1)
ray.shutdown()
'

[ -n "${SLURM_JOB_NODELIST:-}" ] ||
    tf_fail "SLURM_JOB_NODELIST is not set: run this script inside a Slurm job (sbatch FILE)"
for tool in scontrol srun timeout; do
    command -v "$tool" >/dev/null 2>&1 || tf_fail "$tool is not on PATH on $(hostname)"
done
command -v ray >/dev/null 2>&1 ||
    tf_fail 'ray is not on PATH after the setup lines: pip install "tunefleet[ray]" in the' \
        "environment that --setup activates (it must be on a file system every node sees)"
command -v "$TF_PYTHON" >/dev/null 2>&1 ||
    tf_fail "$TF_PYTHON (--python) is not on PATH; give the Python that has ray installed"

TF_NODE_LIST=$(scontrol show hostnames "$SLURM_JOB_NODELIST") ||
    tf_fail "scontrol show hostnames $SLURM_JOB_NODELIST failed"
mapfile -t TF_NODES <<<"$TF_NODE_LIST"
# The batch script runs on the first node: the head, where the experiment runs too.
TF_HEAD_NODE=${SLURMD_NODENAME:-${TF_NODES[0]}}
TF_HEAD_INDEX=""
TF_WORKERS=()
TF_WORKER_INDEX=()
for i in "${!TF_NODES[@]}"; do
    if [ -z "$TF_HEAD_INDEX" ] && [ "${TF_NODES[$i]}" = "$TF_HEAD_NODE" ]; then
        TF_HEAD_INDEX=$i
    else
        TF_WORKERS+=("${TF_NODES[$i]}")
        TF_WORKER_INDEX+=("$i")
    fi
done
if [ -z "$TF_HEAD_INDEX" ]; then
    tf_fail "this node ($TF_HEAD_NODE) is not in the allocation's node list ($SLURM_JOB_NODELIST)"
fi
TF_MIN_NODES=${TF_MIN_NODES:-${#TF_NODES[@]}}
if [ "$TF_MIN_NODES" -gt "${#TF_NODES[@]}" ]; then
    tf_fail "--min-nodes is $TF_MIN_NODES but the allocation has ${#TF_NODES[@]} node(s)" \
        "($SLURM_JOB_NODELIST)"
fi

TF_HEAD_IP=${TUNEFLEET_HEAD_IP:-}
if [ -z "$TF_HEAD_IP" ]; then
    TF_HEAD_IP=$(tf_node_ip) || tf_fail "cannot tell the address of the head node $TF_HEAD_NODE"
fi
TF_HEAD_ADDRESS="$TF_HEAD_IP:$TF_PORT"
export TF_HEAD_IP TF_HEAD_ADDRESS TF_PORT TF_TEMP_DIR TF_INTERFACE TF_GPUS_PER_NODE
# Ray's token authentication with a token of this job's, in the environment of every
# process (nodes, checks, experiment): a head that found ~/.ray/auth_token would turn
# it on by itself, and then workers and clients without RAY_AUTH_MODE could not join.
if [ -z "${RAY_AUTH_MODE:-}" ]; then
    RAY_AUTH_TOKEN=${RAY_AUTH_TOKEN:-$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')}
    export RAY_AUTH_MODE=token RAY_AUTH_TOKEN
fi

tf_log "job ${SLURM_JOB_ID:-?}: ${#TF_NODES[@]} node(s);" \
    "the Ray head on $TF_HEAD_NODE at $TF_HEAD_ADDRESS"
tf_start_node head "$TF_HEAD_NODE" "$(tf_cpus_of "$TF_HEAD_INDEX")"
TF_HEAD_PID=$!
tf_wait_head
tf_log "the Ray head answers; starting ${#TF_WORKERS[@]} worker node(s)"
for i in "${!TF_WORKERS[@]}"; do
    tf_start_node worker "${TF_WORKERS[$i]}" "$(tf_cpus_of "${TF_WORKER_INDEX[$i]}")"
done
TF_JOIN_STATUS=0
tf_run "$TF_PYTHON" -c "$TF_JOIN_CHECK" "$TF_HEAD_ADDRESS" "$TF_MIN_NODES" "$TF_JOIN_TIMEOUT" ||
    TF_JOIN_STATUS=$?
if [ "$TF_JOIN_STATUS" = 3 ]; then
    TF_ENDED=()
    for i in "${!TF_WORKERS[@]}"; do
        kill -0 "${TF_STEP_PIDS[$((i + 1))]}" 2>/dev/null || TF_ENDED+=("${TF_WORKERS[$i]}")
    done
    tf_fail "fewer than $TF_MIN_NODES Ray nodes joined within ${TF_JOIN_TIMEOUT}s" \
        "(--join-timeout, --min-nodes); worker steps that ended: ${TF_ENDED[*]:-none}" \
        "(their output is above)"
elif [ "$TF_JOIN_STATUS" != 0 ]; then
    tf_fail "counting the Ray nodes with $TF_PYTHON failed (exit $TF_JOIN_STATUS, see above);" \
        "--python must be the Python that has ray"
fi

export RAY_ADDRESS="$TF_HEAD_ADDRESS"
tf_log "running the experiment with RAY_ADDRESS=$RAY_ADDRESS: $TF_COMMAND"
# A stop that comes while the experiment starts waits until its pid is known: bash runs
# a trap between commands, so it could otherwise run before TF_EXP_PID is set.
TF_PENDING=""
trap 'TF_PENDING="TERM 15"' TERM
trap 'TF_PENDING="INT 2"' INT
trap 'TF_PENDING="HUP 1"' HUP
set -m  # its own process group, which gets SIGINT on a stop like a Ctrl-C would
bash -c "$TF_COMMAND" &
TF_EXP_PID=$!
set +m
trap 'tf_on_signal TERM 15' TERM
trap 'tf_on_signal INT 2' INT
trap 'tf_on_signal HUP 1' HUP
if [ -n "$TF_PENDING" ]; then tf_on_signal $TF_PENDING; fi
TF_STATUS=0
wait "$TF_EXP_PID" || TF_STATUS=$?
tf_log "the experiment ended with exit status $TF_STATUS"
exit "$TF_STATUS"
"""
