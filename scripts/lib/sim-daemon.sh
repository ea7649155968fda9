# Sourced by the scripts that run outside CUDA programs through fairgpu
# (cuda-samples.sh, rodinia.sh): one fresh daemon per program, executor
# "sim", one VM of 8 GiB and 8 channels.
#
# sim_daemon_setup DIR REGION VM MAX_INSTRUCTIONS [THREADS]: writes
# DIR/fairgpu.toml (THREADS: sim.threads, default 0, the host's CPUs) and
# checks it; sets dstate, region, sock. Needs fairgpu_bin and die().
# start_daemon LOG: starts the daemon in a process group of its own.
# stop_daemon: stops it and whatever is left of its group (its workers).
# Both scripts trap EXIT to stop_daemon.

sim_daemon_setup() {
    dstate=$1
    region=$2
    sock="$dstate/state/control.sock"
    mkdir -p "$dstate/state"
    chmod 700 "$dstate/state"
    cat >"$dstate/fairgpu.toml" <<EOT
[daemon]
control_socket = "$sock"
executor = "sim"
state_dir = "$dstate/state"

[sim]
max_instructions = $4
threads = ${5:-0}

[[vm]]
name = "$3"
weight = 1
memory = "8GiB"
region = "$region"
channels = 8
EOT
    "$fairgpu_bin" serve --config "$dstate/fairgpu.toml" --check >/dev/null ||
        die "the daemon rejects $dstate/fairgpu.toml"
}

daemon_pid=""
start_daemon() {
    rm -f "$sock"
    setsid "$fairgpu_bin" serve --config "$dstate/fairgpu.toml" --log warn >"$1" 2>&1 &
    daemon_pid=$!
    local _
    for _ in $(seq 200); do
        [[ -S $sock && -e $region ]] && return 0
        kill -0 "$daemon_pid" 2>/dev/null || break
        sleep 0.05
    done
    echo "daemon did not start" >>"$1"
    return 1
}

stop_daemon() {
    [[ -n $daemon_pid ]] || return 0
    kill -TERM "$daemon_pid" 2>/dev/null
    local _
    for _ in $(seq 100); do
        kill -0 "$daemon_pid" 2>/dev/null || break
        sleep 0.1
    done
    # Whatever is left of its group (its workers), by the group id we made.
    kill -KILL -- "-$daemon_pid" 2>/dev/null
    wait "$daemon_pid" 2>/dev/null
    daemon_pid=""
}
