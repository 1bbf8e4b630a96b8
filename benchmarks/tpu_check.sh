#!/usr/bin/env bash
# The gate's TPU checks and figures, as one prepared run on a TPU machine (for instance the lent
# v5e: `run` with `bash benchmarks/tpu_check.sh`). CI never has a TPU; this is where the
# TPU-only paths run and where docs/performance.md's TPU column comes from:
#   1. doctor --expect tpu, and doctor and run while another process holds the chip;
#   2. the shipped policies (--require-platform tpu) and the example policies (they must fail);
#   3. the tests marked `tpu`;
#   4. run --base's scenarios through the real CLI (`python -m benchmarks base_scenarios`), a
#      module that picks its TPU at import among them;
#   5. the gate's own cost: plain and --base against hand-written scripts (gate_vs_floor),
#      a planted 1.3x slowdown caught and an unchanged tree passed (base_power), and reading
#      the programs' collectives (comm_overhead), and counting the live device arrays and
#      judging a leak (leak_overhead);
#   6. libtpu's start-up warning shown once per run;
#   7. op time by line: what the TPU's profiler trace holds, a slower verdict naming the line
#      whose op time grew (op_times_check), and what the per-line tables and the traced runs
#      add to a region (line_overhead);
#   8. (section `growth`, not run by default) what a region costs at the start of a run and at
#      its end, over 100 and 500 regions, and the worker's memory (issue 40);
#   9. (section `phases`, not run by default) where inside a region the gate's time goes,
#      stage by stage, against the floor's phases, and part by part (region_phases --parts);
#  10. (section `start`, not run by default) what a run costs before its first worker starts
#      (parent_start);
#  11. (sections `diff` and `loops`, not run by default) the cost verdict against the base heads
#      with the grown line, never "(no source line)" (diff_headline, issue 56), and a loop's
#      work counted by its trip count, not twice (loop_work, issue 57).
#  12. (sections `reach` and `reach-cpu`, not run by default) run --base against a plain run
#      when the change reaches no region's files, or one region's (base_reach, issue 55), on
#      the chip and on the host's CPU (`REACH_ROUNDS`, and `REACH_CHANGES` for the chip's:
#      base_reach's words, "readme comment code" by default).
# Every benchmark is a scenario of `python -m benchmarks` (`python -m benchmarks` lists them);
# the one-off investigations this script once ran (`turns`, `probe`, `costrun`, `textopts`,
# `wait`) are retired, their findings in docs/performance-log.md.
# Sections: `bash benchmarks/tpu_check.sh [checks] [figures] [trees] [growth] [lines] [map] [floor] [phases] [start] [diff] [loops] [reach] [reach-cpu]`
# (default: checks and figures; `lines`, `map` (the example policies: the transfer map works on
# the chip) and `floor` are parts of them that fit one device call). Logs go to
# reports/tpu-check/, and as one archive to $OUT (the device tool's folder) when it is set. Needs junit-xml, msgspec, xmlschema and
# pytest-timeout next to jax; carry them as wheels where the machine has no network (the device
# tool's README), and add them to PYTHONPATH, never replace it.
set -uo pipefail
out=reports/tpu-check
mkdir -p "$out"
export PYTHONUNBUFFERED=1
unset JAX_PLATFORMS  # the workers take the TPU; the gate's own process never starts JAX
# The gate from this checkout wherever a test or a benchmark starts it (it is not installed),
# with the machine's JAX, which PYTHONPATH holds there.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
sections=${*:-checks figures}
status=0
started=$(date +%s)

archive() {  # what the run has so far, to $OUT: a run stopped at its time limit keeps it
    if [ -n "${OUT:-}" ]; then
        tar -czf "$OUT/tpu-check-$(echo "$sections" | tr ' ' '-').tgz" -C reports tpu-check
    fi
}
step() {  # step NAME: a heading with the seconds since the start, in the log and on stdout
    archive
    echo "=== $1 ($(($(date +%s) - started)) s)" | tee -a "$out/summary.log"
}
expect() {  # expect CODE LOG COMMAND...: run COMMAND into LOG; a wrong exit code fails the check
    local code=$1 log=$2
    shift 2
    "$@" >"$out/$log" 2>&1
    local got=$?
    tail -n 15 "$out/$log"
    if [ "$got" -ne "$code" ]; then
        echo "!!! $* exited $got, expected $code" | tee -a "$out/summary.log"
        status=1
    fi
}

if [[ " $sections " == *" checks "* ]]; then
    step "doctor --expect tpu"
    expect 0 doctor.log python3 -m gate doctor --expect tpu

    step "a chip another process holds: doctor, then run"
    python3 -c "import jax, time; jax.devices(); print('holding', flush=True); time.sleep(300)" \
        >"$out/holder.log" 2>&1 &
    holder=$!
    for _ in $(seq 60); do grep -q holding "$out/holder.log" && break; sleep 1; done
    expect 1 doctor-busy.log python3 -m gate doctor --expect tpu
    grep -n "busy" "$out/doctor-busy.log" | head -3
    expect 1 run-busy.log env TRANSFER_GATE_DEVICE_WAIT_S=5 \
        python3 -m gate run --junit "$out/run-busy.xml"
    grep -c "device busy" "$out/run-busy.xml" | sed 's/^/device testcases with "device busy": /'
    kill "$holder"
    wait "$holder" 2>/dev/null

    step "the shipped policies on the TPU (doctor just before: the chip may refuse for a moment)"
    python3 -m gate doctor --expect tpu >/dev/null 2>&1
    expect 0 shipped.log python3 -m gate run --require-platform tpu \
        --junit "$out/shipped.xml" --json "$out/shipped.json"
    echo "libtpu's start-up warning in the run's log: $(grep -c 'Transparent hugepages' \
        "$out/shipped.log") line(s)"

    step "tests marked tpu"
    expect 0 tpu-tests.log python3 -m pytest -q -m tpu -p no:cacheprovider \
        tests/test_doctor.py tests/test_detector.py tests/test_on_the_accelerator.py

    step "run --base scenarios"
    expect 0 scenarios.log python3 -m benchmarks base_scenarios --expect tpu --size 1024 \
        --json "$out/scenarios.json"
fi

# `map` alone: the transfer map on the chip (its capture probe first), by the example policies.
if [[ " $sections " == *" checks "* || " $sections " == *" map "* ]]; then
    step "the example policies (they must fail, at their lines)"
    expect 1 examples.log python3 -m gate run examples/policies --junit "$out/examples.xml"
    grep -o "leaky\.py:[0-9]*[^|]*" "$out/examples.log" | head -4
fi

# `lines` alone fits one device call: op time by line on the chip, and what the per-line
# tables, the traced runs and the leak counts add to a region.
if [[ " $sections " == *" checks "* || " $sections " == *" lines "* ]]; then
    step "op time by line: the TPU trace's XLA Ops, and a slower verdict naming its line"
    # Its own process takes the chip first; the gate's worker after it has exited.
    expect 0 op-times.log python3 -m benchmarks op_times_check --size 2048
fi

if [[ " $sections " == *" figures "* || " $sections " == *" lines "* ]]; then
    step "device memory a step keeps: the counts and judging a leak"
    expect 0 leaks.log env JAX_PLATFORMS=tpu python3 -m benchmarks leak_overhead --rounds 10

    step "what work by line and op time by line add to a region"
    expect 0 line-overhead.log env JAX_PLATFORMS=tpu python3 -m benchmarks line_overhead --runs 10
fi

# `floor` alone: the gate's own cost against hand-written scripts.
if [[ " $sections " == *" figures "* || " $sections " == *" floor "* ]]; then
    step "the gate against hand-written scripts: 20 regions, plain and --base"
    # Each process opens the chip (6-15 s, varying): FLOOR_ROUNDS=3 gives medians that hold
    # (FLOOR_ROUNDS_100 for the 100 regions: ~85 s a round).
    expect 0 floor-20.log python3 -m benchmarks gate_vs_floor --regions 20 \
        --rounds "${FLOOR_ROUNDS:-1}" --growth

    step "the gate against a hand-written script: 100 regions, plain"
    expect 0 floor-100.log python3 -m benchmarks gate_vs_floor --regions 100 \
        --rounds "${FLOOR_ROUNDS_100:-1}" --no-base --growth
fi

if [[ " $sections " == *" figures "* ]]; then
    step "run --base: a 1.3x slower step caught, an unchanged one passed"
    # 1024x1024 matmuls: a loop of small ones is the chip's loop overhead, not work that a
    # planted 1.3x more of shows (base_power.py's docstring).
    expect 0 power.log python3 -m benchmarks base_power --factors 1.0 1.3 --size 1024 \
        --trials "${POWER_TRIALS:-5}" --json "$out/power.json"

    step "reading the programs' collectives"
    expect 0 comm.log env JAX_PLATFORMS=tpu python3 -m benchmarks comm_overhead --runs 20
fi

# `trees`: run --base with each tree in a worker of its own, which on a chip hold it in turn
# (issue 53): power and false alarms, and the cost against the two-tree floor.
if [[ " $sections " == *" trees "* ]]; then
    step "run --base, each tree's worker in turn: a 1.3x slower step caught, an unchanged one passed"
    expect 0 trees-power.log python3 -m benchmarks base_power --factors 1.0 1.3 --size 1024 \
        --trials "${POWER_TRIALS:-5}" --json "$out/trees-power.json"
fi

# The sections of one benchmark each, not run by default: its log is NAME.log.
only() {  # only NAME HEADING COMMAND...: COMMAND under HEADING, where section NAME was asked for
    local name=$1 heading=$2
    shift 2
    if [[ " $sections " == *" $name "* ]]; then
        step "$heading"
        expect 0 "$name.log" "$@"
    fi
}
only diff "the cost verdict against the base names the grown line (issue 56)" \
    python3 -m benchmarks diff_headline --size 4096
only loops "a loop's work: rolled and unrolled read the same (issue 57)" \
    python3 -m benchmarks loop_work --size 1024
only phases "a region's stages against the floor's phases (region_phases)" \
    python3 -m benchmarks region_phases --regions 20 --rounds 2 --parts
only start "what a run costs before its first worker starts (parent_start)" \
    python3 -m benchmarks parent_start --rounds 5
only reach "run --base when the change reaches no region, or one (issue 55), on the chip" \
    env JAX_PLATFORMS=tpu python3 -m benchmarks base_reach --rounds "${REACH_ROUNDS:-1}" \
    --changes ${REACH_CHANGES:-readme comment code}
only reach-cpu "the same on the host's CPU" \
    python3 -m benchmarks base_reach --rounds "${REACH_ROUNDS:-2}"

if [[ " $sections " == *" growth "* ]]; then
    # Issue 40: the last 20 regions against the first 20 by their JUnit times (target 1.10x),
    # the worker's memory across the run, and the hand-written script's own, at 100 and 500
    # regions. Long: each size runs twice, the gate and the script.
    step "cost per region as a run goes on: 100 and 500 regions"
    expect 0 growth.log python3 -m benchmarks gate_vs_floor --regions --growth 100 500
fi

step "done, status $status"
archive
exit "$status"
